-- The audit record: one table per Kafka topic the audit writer reads, one
-- row per committed record, identified by its position (kafka_topic,
-- kafka_partition, kafka_offset).
--
-- Engine. ReplacingMergeTree whose sorting key ends with the position, so a
-- record written twice collapses into one row. The audit writer never
-- writes a record twice (see analytics/auditwriter: it resumes after the
-- highest offset stored here, once no insert of an earlier writer is still
-- running), so this is a safety net for operator mistakes such as two
-- writers on one database; queries that must be exact under that mistake
-- add `LIMIT 1 BY kafka_topic, kafka_partition, kafka_offset` or FINAL.
-- The roll-ups of 0002 cannot be repaired that way: they are exact because
-- the writer is.
--
-- Sorting keys serve the auditors' look-ups: by notification id first (the
-- whole story of one notification is one range of the primary index); by
-- recipient and time, and by dedupe key, through projections that store
-- only the sort columns and _part_offset (secondary indexes, used once a
-- table holds min_table_rows_to_use_projection_index rows).
--
-- Partitions are calendar months (UTC). The TTL is {{ttl_days}} days on every
-- plan (herald migrate --ttl-days reconciles it); ttl_only_drop_parts drops
-- whole monthly parts, so rows live at least that long and at most a month
-- longer.
--
-- Records the writer cannot decode keep their position, record time, the
-- error (decode_error) and the raw value (raw, at most 64 KiB); every other
-- column is empty. Roll-ups skip them.

CREATE TABLE IF NOT EXISTS {{db}}.requests
(
    kafka_topic        LowCardinality(String),
    kafka_partition    Int32,
    kafka_offset       Int64,
    at                 DateTime64(3, 'UTC') COMMENT 'record time: the time the dedupe stage decides on',
    request_id         String,
    tenant             LowCardinality(String),
    type               LowCardinality(String),
    recipient          String,
    notification_id    String,
    id_source          LowCardinality(String),
    key                String COMMENT 'the notification key (JSON) when the id is the canonical one',
    dedupe_key         String,
    dedupe_window_ms   Int64,
    idempotency_key    String,
    idempotency_ttl_ms Int64,
    title              String,
    body               String,
    payload            String,
    locale             LowCardinality(String),
    channels           Array(LowCardinality(String)),
    producer           LowCardinality(String),
    source             LowCardinality(String),
    created_at         DateTime64(3, 'UTC') COMMENT 'the producer''s clock',
    decode_error       String,
    raw                String,
    written_at         DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX request_id_bf request_id TYPE bloom_filter(0.001) GRANULARITY 1,
    PROJECTION by_recipient (SELECT _part_offset ORDER BY tenant, recipient, at),
    PROJECTION by_dedupe_key (SELECT _part_offset ORDER BY dedupe_key, tenant, type, recipient)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (notification_id, at, kafka_topic, kafka_partition, kafka_offset)
TTL toDateTime(at) + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, deduplicate_merge_projection_mode = 'rebuild', ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS {{db}}.decisions
(
    kafka_topic              LowCardinality(String),
    kafka_partition          Int32,
    kafka_offset             Int64,
    at                       DateTime64(3, 'UTC') COMMENT 'record time of the request decided on',
    decision_id              String,
    stage                    LowCardinality(String),
    outcome                  LowCardinality(String) COMMENT 'accepted, or why it was not: duplicate, idempotent_replay, idempotency_conflict, rate_limited, ...',
    detail                   String,
    request_id               String,
    tenant                   LowCardinality(String),
    type                     LowCardinality(String),
    recipient                String,
    notification_id          String,
    dedupe_key               String,
    idempotency_key          String,
    producer                 LowCardinality(String),
    channel                  LowCardinality(String),
    original_request_id      String,
    original_notification_id String,
    original_at              DateTime64(3, 'UTC'),
    original_outcome         LowCardinality(String),
    source_topic             LowCardinality(String),
    source_partition         Int32,
    source_offset            Int64,
    decode_error             String,
    raw                      String,
    written_at               DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX request_id_bf request_id TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX source_offset_mm source_offset TYPE minmax GRANULARITY 1,
    PROJECTION by_recipient (SELECT _part_offset ORDER BY tenant, recipient, at),
    PROJECTION by_dedupe_key (SELECT _part_offset ORDER BY dedupe_key, tenant, type, recipient)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (notification_id, at, kafka_topic, kafka_partition, kafka_offset)
TTL toDateTime(at) + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, deduplicate_merge_projection_mode = 'rebuild', ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS {{db}}.attempts
(
    kafka_topic         LowCardinality(String),
    kafka_partition     Int32,
    kafka_offset        Int64,
    at                  DateTime64(3, 'UTC'),
    attempt_id          String,
    delivery_id         String,
    notification_id     String,
    tenant              LowCardinality(String),
    type                LowCardinality(String),
    recipient           String,
    device_id           String,
    channel             LowCardinality(String),
    attempt             UInt16,
    result              LowCardinality(String) COMMENT 'sent, retryable, permanent, ambiguous',
    classification      LowCardinality(String),
    provider_status     Int32,
    provider_reason     String,
    provider_message_id String,
    collapse_id         String,
    apns_id             String,
    locale              LowCardinality(String),
    latency_ms          Int64,
    retry_after_ms      Int64,
    decode_error        String,
    raw                 String,
    written_at          DateTime64(3, 'UTC') DEFAULT now64(3),
    PROJECTION by_recipient (SELECT _part_offset ORDER BY tenant, recipient, at)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (notification_id, delivery_id, at, kafka_topic, kafka_partition, kafka_offset)
TTL toDateTime(at) + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, deduplicate_merge_projection_mode = 'rebuild', ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS {{db}}.outcomes
(
    kafka_topic     LowCardinality(String),
    kafka_partition Int32,
    kafka_offset    Int64,
    at              DateTime64(3, 'UTC'),
    delivery_id     String,
    notification_id String,
    tenant          LowCardinality(String),
    type            LowCardinality(String),
    recipient       String,
    device_id       String,
    channel         LowCardinality(String),
    status          LowCardinality(String) COMMENT 'delivered, dead_lettered, device_retired',
    reason          String,
    attempts        UInt16,
    decode_error    String,
    raw             String,
    written_at      DateTime64(3, 'UTC') DEFAULT now64(3),
    PROJECTION by_recipient (SELECT _part_offset ORDER BY tenant, recipient, at)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (notification_id, delivery_id, at, kafka_topic, kafka_partition, kafka_offset)
TTL toDateTime(at) + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, deduplicate_merge_projection_mode = 'rebuild', ttl_only_drop_parts = 1;
