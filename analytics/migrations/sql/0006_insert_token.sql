-- Every audit row keeps the insert_deduplication_token of the INSERT that
-- wrote it, so that the audit writer can send that INSERT again.
--
-- A ClickHouse server killed during an INSERT can commit the table's part
-- and not its materialized views' parts (the roll-ups of 0002): ClickHouse
-- commits them one after the other (ClickHouse#104661). On every start the
-- writer finds its last INSERT of each table by this column (the token of
-- the latest written_at, and the offsets its rows hold) and sends it again:
-- the same records, read again from Kafka, with the same token. The table
-- drops the block as a duplicate, and every roll-up stores the block's
-- aggregate if it lacks it and drops it if it has it
-- (deduplicate_blocks_in_dependent_materialized_views, each roll-up's own
-- deduplication window). Rows written before this migration have an empty
-- token and are never sent again.
ALTER TABLE {{db}}.requests ADD COLUMN IF NOT EXISTS insert_token LowCardinality(String) DEFAULT '' COMMENT 'insert_deduplication_token of the INSERT that wrote the row';
ALTER TABLE {{db}}.decisions ADD COLUMN IF NOT EXISTS insert_token LowCardinality(String) DEFAULT '' COMMENT 'insert_deduplication_token of the INSERT that wrote the row';
ALTER TABLE {{db}}.attempts ADD COLUMN IF NOT EXISTS insert_token LowCardinality(String) DEFAULT '' COMMENT 'insert_deduplication_token of the INSERT that wrote the row';
ALTER TABLE {{db}}.outcomes ADD COLUMN IF NOT EXISTS insert_token LowCardinality(String) DEFAULT '' COMMENT 'insert_deduplication_token of the INSERT that wrote the row';
ALTER TABLE {{db}}.receipts ADD COLUMN IF NOT EXISTS insert_token LowCardinality(String) DEFAULT '' COMMENT 'insert_deduplication_token of the INSERT that wrote the row';
