-- What devices report about notifications (herald.receipt/v1, POST
-- /v1/receipts): displayed, opened, or dropped (the web client's seen-set
-- dropped a repeat of a notification it had already shown). Apart from the
-- attempts table: an attempt's "sent" is the push service's acceptance,
-- a receipt is the device's word.
--
-- One row per Kafka record, like every audit table (the writer's exactly-once
-- and its resume rule are unchanged). A device may send one receipt more
-- than once (its POST was retried): every copy carries the same receipt_id,
-- identity.ReceiptID(delivery id, kind). Count receipts by receipt_id
-- (uniqExact(receipt_id), or LIMIT 1 BY receipt_id), never with count():
-- that is the audit's deduplication of receipts, so each kind counts at most
-- once per delivery. The time of a row is when herald received the receipt;
-- client_at is the device's clock, as reported.
CREATE TABLE IF NOT EXISTS {{db}}.receipts
(
    kafka_topic     LowCardinality(String),
    kafka_partition Int32,
    kafka_offset    Int64,
    at              DateTime64(3, 'UTC') COMMENT 'when herald received the receipt',
    receipt_id      String COMMENT 'identity.ReceiptID(delivery_id, kind): the same for every copy of one receipt',
    kind            LowCardinality(String) COMMENT 'displayed, opened, dropped',
    delivery_id     String,
    notification_id String,
    tenant          LowCardinality(String),
    type            LowCardinality(String) COMMENT 'as the device reported it (the push payload''s type)',
    recipient       String,
    device_id       String,
    channel         LowCardinality(String),
    client_at       DateTime64(3, 'UTC') COMMENT 'the device''s clock, as reported; the epoch when not',
    decode_error    String,
    raw             String,
    written_at      DateTime64(3, 'UTC') DEFAULT now64(3),
    PROJECTION by_recipient (SELECT _part_offset ORDER BY tenant, recipient, at)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (notification_id, delivery_id, receipt_id, at, kafka_topic, kafka_partition, kafka_offset)
TTL toDateTime(at) + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, deduplicate_merge_projection_mode = 'rebuild', ttl_only_drop_parts = 1;
