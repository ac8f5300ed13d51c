-- Hourly roll-ups for analysts, filled by materialized views as the audit
-- writer inserts. SummingMergeTree adds rows up on merge: always read them
-- with sum() and GROUP BY (the views of 0003 do).
--
-- Exactly once. A materialized view counts every block inserted into its
-- source table, so a roll-up is exact only if no record is inserted twice.
-- The audit writer guarantees that, and its insert deduplication token
-- (insert_deduplication_token) also covers a retried block; for the token to
-- reach a roll-up, the roll-up table needs its own
-- non_replicated_deduplication_window, set below (verified on ClickHouse
-- 26.7: without it a deduplicated retry is still counted by the view).

CREATE TABLE IF NOT EXISTS {{db}}.requests_hourly
(
    tenant   LowCardinality(String),
    type     LowCardinality(String),
    producer LowCardinality(String),
    source   LowCardinality(String),
    hour     DateTime('UTC'),
    requests UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (tenant, type, producer, source, hour)
TTL hour + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.requests_hourly_mv TO {{db}}.requests_hourly AS
SELECT tenant, type, producer, source, toStartOfHour(at) AS hour, count() AS requests
FROM {{db}}.requests
WHERE decode_error = ''
GROUP BY tenant, type, producer, source, hour;

-- The dedupe stage's decisions per tenant, type and hour. A hit is a repeat
-- herald caught (duplicate or idempotent_replay), a miss is an accepted
-- notification; conflicts and rejections are errors, neither.
CREATE TABLE IF NOT EXISTS {{db}}.dedupe_hourly
(
    tenant     LowCardinality(String),
    type       LowCardinality(String),
    hour       DateTime('UTC'),
    decisions  UInt64,
    accepted   UInt64,
    duplicates UInt64,
    replays    UInt64,
    conflicts  UInt64,
    rejected   UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (tenant, type, hour)
TTL hour + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.dedupe_hourly_mv TO {{db}}.dedupe_hourly AS
SELECT
    tenant,
    type,
    toStartOfHour(at) AS hour,
    count() AS decisions,
    countIf(outcome = 'accepted') AS accepted,
    countIf(outcome = 'duplicate') AS duplicates,
    countIf(outcome = 'idempotent_replay') AS replays,
    countIf(outcome = 'idempotency_conflict') AS conflicts,
    countIf(outcome = 'rejected') AS rejected
FROM {{db}}.decisions
WHERE decode_error = '' AND stage = 'dedupe'
GROUP BY tenant, type, hour;

-- Every stage's decisions by reason.
CREATE TABLE IF NOT EXISTS {{db}}.decisions_hourly
(
    tenant    LowCardinality(String),
    type      LowCardinality(String),
    stage     LowCardinality(String),
    outcome   LowCardinality(String),
    hour      DateTime('UTC'),
    decisions UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (tenant, type, stage, outcome, hour)
TTL hour + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.decisions_hourly_mv TO {{db}}.decisions_hourly AS
SELECT tenant, type, stage, outcome, toStartOfHour(at) AS hour, count() AS decisions
FROM {{db}}.decisions
WHERE decode_error = ''
GROUP BY tenant, type, stage, outcome, hour;

-- Transport attempts by channel and classification.
CREATE TABLE IF NOT EXISTS {{db}}.attempts_hourly
(
    tenant         LowCardinality(String),
    type           LowCardinality(String),
    channel        LowCardinality(String),
    result         LowCardinality(String),
    classification LowCardinality(String),
    hour           DateTime('UTC'),
    attempts       UInt64,
    retries        UInt64 COMMENT 'attempts after the first of their delivery',
    latency_ms_sum UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (tenant, type, channel, result, classification, hour)
TTL hour + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.attempts_hourly_mv TO {{db}}.attempts_hourly AS
SELECT
    tenant, type, channel, result, classification,
    toStartOfHour(at) AS hour,
    count() AS attempts,
    countIf(attempt > 1) AS retries,
    sum(toUInt64(greatest(latency_ms, 0))) AS latency_ms_sum
FROM {{db}}.attempts
WHERE decode_error = ''
GROUP BY tenant, type, channel, result, classification, hour;

-- Final states of deliveries by channel, status and reason.
CREATE TABLE IF NOT EXISTS {{db}}.outcomes_hourly
(
    tenant       LowCardinality(String),
    type         LowCardinality(String),
    channel      LowCardinality(String),
    status       LowCardinality(String),
    reason       LowCardinality(String),
    hour         DateTime('UTC'),
    deliveries   UInt64,
    attempts_sum UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (tenant, type, channel, status, reason, hour)
TTL hour + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.outcomes_hourly_mv TO {{db}}.outcomes_hourly AS
SELECT
    tenant, type, channel, status, reason,
    toStartOfHour(at) AS hour,
    count() AS deliveries,
    sum(toUInt64(attempts)) AS attempts_sum
FROM {{db}}.outcomes
WHERE decode_error = ''
GROUP BY tenant, type, channel, status, reason, hour;
