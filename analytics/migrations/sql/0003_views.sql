-- Views over the roll-ups, in the words analysts use. Each one sums the
-- SummingMergeTree rows it reads, so it is exact whatever merges have run.

-- Dedup hit rate per tenant, type and hour: hits / (hits + misses), where a
-- hit is a caught repeat (duplicate or idempotent_replay) and a miss an
-- accepted notification. NULL when the hour has neither.
CREATE VIEW IF NOT EXISTS {{db}}.dedupe_hit_rate_hourly AS
SELECT
    tenant, type, hour,
    d + r AS hits,
    a AS misses,
    d AS duplicates,
    r AS replays,
    c AS conflicts,
    x AS rejected,
    hits / nullIf(hits + misses, 0) AS hit_rate
FROM
(
    SELECT tenant, type, hour, sum(duplicates) AS d, sum(replays) AS r, sum(accepted) AS a, sum(conflicts) AS c, sum(rejected) AS x
    FROM {{db}}.dedupe_hourly
    GROUP BY tenant, type, hour
);

-- Decisions of every stage by reason (outcome).
CREATE VIEW IF NOT EXISTS {{db}}.decisions_by_reason_hourly AS
SELECT tenant, type, stage, outcome, hour, sum(n) AS decisions
FROM (SELECT tenant, type, stage, outcome, hour, decisions AS n FROM {{db}}.decisions_hourly)
GROUP BY tenant, type, stage, outcome, hour;

-- Provider calls by channel, result and classification.
CREATE VIEW IF NOT EXISTS {{db}}.attempts_by_channel_hourly AS
SELECT
    tenant, type, channel, result, classification, hour,
    n AS attempts,
    rt AS retries,
    l / nullIf(n, 0) AS avg_latency_ms
FROM
(
    SELECT tenant, type, channel, result, classification, hour, sum(attempts) AS n, sum(retries) AS rt, sum(latency_ms_sum) AS l
    FROM {{db}}.attempts_hourly
    GROUP BY tenant, type, channel, result, classification, hour
);

-- Final delivery states by channel, status and reason.
CREATE VIEW IF NOT EXISTS {{db}}.outcomes_by_channel_hourly AS
SELECT
    tenant, type, channel, status, reason, hour,
    n AS deliveries,
    s / nullIf(n, 0) AS avg_attempts
FROM
(
    SELECT tenant, type, channel, status, reason, hour, sum(deliveries) AS n, sum(attempts_sum) AS s
    FROM {{db}}.outcomes_hourly
    GROUP BY tenant, type, channel, status, reason, hour
);

-- Logical notifications against transport attempts, per tenant, type and
-- hour:
--   requests       producer calls (one per recipient),
--   notifications  logical notifications: requests the dedupe stage accepted,
--   deliveries     pushes that reached a final state (one per device),
--   attempts       provider calls, retries included.
-- Requests above notifications is what dedup saved; attempts above
-- deliveries is what retries cost.
CREATE VIEW IF NOT EXISTS {{db}}.notifications_vs_attempts_hourly AS
SELECT
    tenant,
    type,
    hour,
    sum(r) AS requests,
    sum(n) AS notifications,
    sum(d) AS deliveries,
    sum(a) AS attempts,
    sum(a) / nullIf(sum(d), 0) AS attempts_per_delivery
FROM
(
    SELECT tenant, type, hour, requests AS r, toUInt64(0) AS n, toUInt64(0) AS d, toUInt64(0) AS a FROM {{db}}.requests_hourly
    UNION ALL
    SELECT tenant, type, hour, 0, accepted, 0, 0 FROM {{db}}.dedupe_hourly
    UNION ALL
    SELECT tenant, type, hour, 0, 0, deliveries, 0 FROM {{db}}.outcomes_hourly
    UNION ALL
    SELECT tenant, type, hour, 0, 0, 0, attempts FROM {{db}}.attempts_hourly
)
GROUP BY tenant, type, hour;
