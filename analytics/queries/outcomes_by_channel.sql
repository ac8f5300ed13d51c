-- Final states of deliveries per tenant, channel and status between
-- `since` and `until` (whole hours): delivered, dead_lettered or
-- device_retired, with the average attempts each took. One row per
-- delivery (one push to one device) that reached its final state.
-- Parameters: since DateTime('UTC'), until DateTime('UTC').
SELECT
    tenant,
    channel,
    status,
    deliveries,
    attempts_sum / deliveries AS avg_attempts
FROM
(
    SELECT tenant, channel, status, sum(deliveries) AS deliveries, sum(attempts_sum) AS attempts_sum
    FROM outcomes_hourly
    WHERE hour >= {since:DateTime('UTC')} AND hour < {until:DateTime('UTC')}
    GROUP BY tenant, channel, status
)
WHERE deliveries > 0
ORDER BY tenant, channel, status
