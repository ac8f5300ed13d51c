-- Jobs near their retry limit: deliveries attempted since `since` that have
-- no final outcome yet, whose last attempt failed in a way that is retried
-- (retryable or ambiguous), and whose attempt count is within `margin` of
-- `max_attempts`. They are about to be dead-lettered.
-- Parameters: since DateTime('UTC'), max_attempts Int32, margin Int32.
SELECT
    tenant,
    type,
    delivery_id,
    notification_id,
    recipient,
    device_id,
    channel,
    attempts_made,
    toInt32({max_attempts:Int32} - attempts_made) AS attempts_left,
    last_result,
    last_reason,
    last_at
FROM
(
    SELECT
        tenant,
        type,
        delivery_id,
        any(notification_id) AS notification_id,
        any(recipient) AS recipient,
        any(device_id) AS device_id,
        any(channel) AS channel,
        toInt32(max(attempt)) AS attempts_made,
        argMax(result, (attempt, at)) AS last_result,
        argMax(provider_reason, (attempt, at)) AS last_reason,
        max(at) AS last_at
    FROM
    (
        SELECT * FROM attempts
        WHERE at >= {since:DateTime('UTC')} AND decode_error = ''
        LIMIT 1 BY kafka_topic, kafka_partition, kafka_offset
    )
    GROUP BY tenant, type, delivery_id
)
WHERE attempts_made >= {max_attempts:Int32} - {margin:Int32}
  AND last_result IN ('retryable', 'ambiguous')
  AND delivery_id NOT IN (SELECT delivery_id FROM outcomes WHERE at >= {since:DateTime('UTC')} AND decode_error = '')
ORDER BY attempts_made DESC, last_at, delivery_id
