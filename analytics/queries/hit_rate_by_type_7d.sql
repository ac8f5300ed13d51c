-- Dedup hit rate per tenant and type over the 7 days before `until`.
-- A hit is a repeat herald caught (duplicate or idempotent_replay), a miss
-- an accepted notification; conflicts and rejections are neither.
-- client_drops counts the repeats that got past herald and that a web
-- device's seen-set dropped (receipts of kind dropped, counted by receipt
-- id: a receipt sent twice counts once, so at most one per delivery),
-- received in the same 7 days; the type is the one the device reported.
-- hit_rate_with_client_drops counts them as hits too:
-- (hits + client_drops) / (hits + client_drops + misses).
-- Parameters: until DateTime('UTC'), e.g. --param_until="2026-12-01 00:00:00".
SELECT
    tenant,
    type,
    hits,
    misses,
    hits / (hits + misses) AS hit_rate,
    client_drops,
    (hits + client_drops) / (hits + client_drops + misses) AS hit_rate_with_client_drops
FROM
(
    SELECT tenant, type, sum(h) AS hits, sum(m) AS misses, sum(c) AS client_drops
    FROM
    (
        SELECT tenant, type, sum(duplicates + replays) AS h, sum(accepted) AS m, toUInt64(0) AS c
        FROM dedupe_hourly
        WHERE hour >= {until:DateTime('UTC')} - INTERVAL 7 DAY AND hour < {until:DateTime('UTC')}
        GROUP BY tenant, type
        UNION ALL
        SELECT tenant, type, toUInt64(0), toUInt64(0), uniqExact(receipt_id)
        FROM receipts
        WHERE kind = 'dropped' AND decode_error = ''
          AND at >= {until:DateTime('UTC')} - INTERVAL 7 DAY AND at < {until:DateTime('UTC')}
        GROUP BY tenant, type
    )
    GROUP BY tenant, type
)
WHERE hits + misses > 0
ORDER BY tenant, type
