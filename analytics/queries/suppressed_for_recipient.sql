-- Missing-notification report: everything herald did not deliver to one
-- recipient between `since` and `until`, with the reason. Decisions other
-- than accepted (dedupe) and routed (route): duplicate, idempotent_replay,
-- idempotency_conflict, rejected, and the route stage's rate_limited,
-- digested, opted_out (per channel or whole), deferred (quiet hours; the
-- release follows as routed) and no_target; and deliveries that ended other
-- than delivered (dead_lettered, device_retired). Answers "the user says
-- they never got it".
-- Parameters: tenant String, recipient String, since DateTime('UTC'),
-- until DateTime('UTC').
SELECT at, kind, notification_id, request_id, delivery_id, channel, reason, detail, original_request_id
FROM
(
    (
        SELECT at, 'decision' AS kind, notification_id, request_id, '' AS delivery_id, channel,
               outcome AS reason, detail, original_request_id, kafka_partition, kafka_offset
        FROM decisions
        WHERE tenant = {tenant:String} AND recipient = {recipient:String}
          AND at >= {since:DateTime('UTC')} AND at < {until:DateTime('UTC')}
          AND decode_error = '' AND outcome NOT IN ('accepted', 'routed')
        LIMIT 1 BY kafka_topic, kafka_partition, kafka_offset
    )
    UNION ALL
    (
        SELECT at, 'delivery' AS kind, notification_id, '' AS request_id, delivery_id, channel,
               status AS reason, reason AS detail, '' AS original_request_id, kafka_partition, kafka_offset
        FROM outcomes
        WHERE tenant = {tenant:String} AND recipient = {recipient:String}
          AND at >= {since:DateTime('UTC')} AND at < {until:DateTime('UTC')}
          AND decode_error = '' AND status != 'delivered'
        LIMIT 1 BY kafka_topic, kafka_partition, kafka_offset
    )
)
ORDER BY at, kind, kafka_partition, kafka_offset
