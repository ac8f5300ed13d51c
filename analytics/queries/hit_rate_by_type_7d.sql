-- Dedup hit rate per tenant and type over the 7 days before `until`.
-- A hit is a repeat herald caught (duplicate or idempotent_replay), a miss
-- an accepted notification; conflicts and rejections are neither.
-- Parameters: until DateTime('UTC'), e.g. --param_until="2026-12-01 00:00:00".
SELECT
    tenant,
    type,
    hits,
    misses,
    hits / (hits + misses) AS hit_rate
FROM
(
    SELECT tenant, type, sum(duplicates + replays) AS hits, sum(accepted) AS misses
    FROM dedupe_hourly
    WHERE hour >= {until:DateTime('UTC')} - INTERVAL 7 DAY AND hour < {until:DateTime('UTC')}
    GROUP BY tenant, type
)
WHERE hits + misses > 0
ORDER BY tenant, type
