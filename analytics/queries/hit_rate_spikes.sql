-- Sudden spikes: types whose dedup hit rate in the last `period_hours`
-- before `until` rose by at least `min_increase` (0.2 = twenty points) over
-- the period before, with at least `min_decisions` hits and misses in each
-- period. A spike usually means a producer started retrying (an outage
-- downstream of it) or a key lost a component.
-- Parameters: until DateTime('UTC'), period_hours UInt32,
-- min_decisions UInt64, min_increase Float64.
WITH {until:DateTime('UTC')} - toIntervalHour({period_hours:UInt32}) AS current_start
SELECT
    tenant,
    type,
    previous_hits,
    previous_misses,
    previous_hits / (previous_hits + previous_misses) AS previous_rate,
    current_hits,
    current_misses,
    current_hits / (current_hits + current_misses) AS current_rate,
    current_rate - previous_rate AS increase
FROM
(
    SELECT
        tenant,
        type,
        sumIf(duplicates + replays, hour < current_start) AS previous_hits,
        sumIf(accepted, hour < current_start) AS previous_misses,
        sumIf(duplicates + replays, hour >= current_start) AS current_hits,
        sumIf(accepted, hour >= current_start) AS current_misses
    FROM dedupe_hourly
    WHERE hour >= current_start - toIntervalHour({period_hours:UInt32}) AND hour < {until:DateTime('UTC')}
    GROUP BY tenant, type
)
WHERE previous_hits + previous_misses >= {min_decisions:UInt64}
  AND current_hits + current_misses >= {min_decisions:UInt64}
  AND increase >= {min_increase:Float64}
ORDER BY increase DESC, tenant, type
