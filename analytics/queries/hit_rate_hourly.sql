-- Dedup hit rate per tenant, type and hour between `since` and `until`
-- (whole hours), the series the dashboard draws. A hit is a repeat herald
-- caught (duplicate or idempotent_replay), a miss an accepted notification;
-- conflicts and rejections are neither. Hours with neither are left out.
-- Parameters: since DateTime('UTC'), until DateTime('UTC').
SELECT
    tenant,
    type,
    hour,
    hits,
    misses,
    hits / (hits + misses) AS hit_rate
FROM
(
    SELECT tenant, type, hour, sum(duplicates + replays) AS hits, sum(accepted) AS misses
    FROM dedupe_hourly
    WHERE hour >= {since:DateTime('UTC')} AND hour < {until:DateTime('UTC')}
    GROUP BY tenant, type, hour
)
WHERE hits + misses > 0
ORDER BY tenant, type, hour
