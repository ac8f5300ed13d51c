-- herald.request/v1 gained the optional targetDevice (a send to one device
-- of the recipient): keep it in the audit of what was asked.
ALTER TABLE {{db}}.requests ADD COLUMN IF NOT EXISTS target_device String DEFAULT '' AFTER channels;
