-- Deliveries that may have been shown twice, attempted between `since` and
-- `until`: those with two or more attempts that may have reached the device
-- (result sent or ambiguous: an ambiguous attempt is a request the provider
-- may have accepted without herald learning it, a timeout or reset after
-- the request was written, or a sink that died mid-call). Every other
-- delivery reached its device at most once. herald retried them with the
-- same collapse id (and apns-id), so the device most likely showed one
-- banner; the app's seen-set drops a second copy by notification id.
-- Parameters: since DateTime('UTC'), until DateTime('UTC').
SELECT
    tenant,
    channel,
    delivery_id,
    any(notification_id) AS notification_id,
    any(recipient) AS recipient,
    any(device_id) AS device_id,
    any(collapse_id) AS collapse_id,
    any(apns_id) AS apns_id,
    toUInt32(countIf(result = 'ambiguous')) AS ambiguous_attempts,
    toUInt32(countIf(result IN ('sent', 'ambiguous'))) AS possible_copies,
    min(at) AS first_at,
    max(at) AS last_at
FROM
(
    SELECT * FROM attempts
    WHERE at >= {since:DateTime('UTC')} AND at < {until:DateTime('UTC')} AND decode_error = ''
    LIMIT 1 BY kafka_topic, kafka_partition, kafka_offset
)
GROUP BY tenant, channel, delivery_id
HAVING possible_copies >= 2
ORDER BY tenant, channel, last_at, delivery_id
