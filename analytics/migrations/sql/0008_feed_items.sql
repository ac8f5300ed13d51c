-- The in-app feed (herald.feedItem/v1 on herald.feed): one row per Kafka
-- record, as in every audit table, copied by the audit writer. The feed
-- sink writes an item when it delivers a notification to a recipient's
-- feed; the API writes the item again, with read_at, when it is read. The
-- API's feed endpoints (GET /v1/recipients/{id}/feed and the read marks)
-- read a recipient's items here, newest first, so that an API instance
-- holds no copy of herald.feed and reads only the one recipient's rows.
--
-- Every version of an item (the sink's; a read mark; the sink's again for
-- a later occurrence of the notification, unread) is a row; all of them
-- come from one Kafka partition (one key), so the latest is the one of the
-- highest kafka_offset, as on the compacted topic. Read a recipient's items
-- with LIMIT 1 BY notification_id ordered by kafka_offset descending
-- (api/feed.go): merges (ReplacingMergeTree over (tenant, recipient,
-- notification_id), keeping the last row inserted, which the writer
-- inserts in offset order) only shrink the table, and never meet rows of
-- two months (the row time is the item's createdAt, which a later
-- occurrence changes), which the query reconciles.
CREATE TABLE IF NOT EXISTS {{db}}.feed_items
(
    kafka_topic     LowCardinality(String),
    kafka_partition Int32,
    kafka_offset    Int64,
    at              DateTime64(3, 'UTC') COMMENT 'the notification''s creation (the item''s createdAt): the feed''s order',
    tenant          LowCardinality(String),
    recipient       String,
    notification_id String,
    type            LowCardinality(String),
    title           String,
    body            String,
    payload         String,
    delivered_at    DateTime64(3, 'UTC') COMMENT 'when the feed sink wrote the item',
    read_at         DateTime64(3, 'UTC') COMMENT 'when it was read; the epoch while unread',
    decode_error    String,
    raw             String,
    insert_token    LowCardinality(String) DEFAULT '' COMMENT 'insert_deduplication_token of the INSERT that wrote the row',
    written_at      DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (tenant, recipient, notification_id)
TTL toDateTime(at) + toIntervalDay({{ttl_days}})
SETTINGS non_replicated_deduplication_window = 1000, ttl_only_drop_parts = 1;
