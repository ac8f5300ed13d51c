-- The deliveries a route decision made, one element per delivery in four
-- parallel arrays: its id, channel, device and state (queued or deferred).
-- An idempotent replay answers what its original answered, deliveries
-- included, from any API instance and after a restart: the API reads them
-- here (the route stage never sees a replay). Rows written before this
-- migration have empty arrays.
ALTER TABLE {{db}}.decisions ADD COLUMN IF NOT EXISTS delivery_ids Array(String) DEFAULT [] COMMENT 'a route decision''s deliveries: ids' AFTER channel;
ALTER TABLE {{db}}.decisions ADD COLUMN IF NOT EXISTS delivery_channels Array(LowCardinality(String)) DEFAULT [] COMMENT 'a route decision''s deliveries: channels, as delivery_ids' AFTER delivery_ids;
ALTER TABLE {{db}}.decisions ADD COLUMN IF NOT EXISTS delivery_devices Array(String) DEFAULT [] COMMENT 'a route decision''s deliveries: device ids (empty for the feed), as delivery_ids' AFTER delivery_channels;
ALTER TABLE {{db}}.decisions ADD COLUMN IF NOT EXISTS delivery_states Array(LowCardinality(String)) DEFAULT [] COMMENT 'a route decision''s deliveries: queued or deferred, as delivery_ids' AFTER delivery_devices;
