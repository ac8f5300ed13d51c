-- Types whose dedup hit rate was above 50% over the 7 days before `until`,
-- among those with at least `min_decisions` hits and misses: most sends are
-- repeats. Producers retrying too eagerly, or keys too broad (different
-- notifications sharing one key are silently dropped as duplicates).
-- Parameters: until DateTime('UTC'), min_decisions UInt64.
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
WHERE hits + misses >= {min_decisions:UInt64} AND hits / (hits + misses) > 0.5
ORDER BY hit_rate DESC, tenant, type
