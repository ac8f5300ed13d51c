-- Provider calls per tenant, channel and result between `since` and
-- `until` (whole hours): sent, retryable, permanent or ambiguous, how many
-- were retries (attempts after the first of their delivery) and their
-- average latency. Transport attempts, not notifications: one delivery may
-- take several.
-- Parameters: since DateTime('UTC'), until DateTime('UTC').
SELECT
    tenant,
    channel,
    result,
    attempts,
    retries,
    latency_ms_sum / attempts AS avg_latency_ms
FROM
(
    SELECT tenant, channel, result, sum(attempts) AS attempts, sum(retries) AS retries, sum(latency_ms_sum) AS latency_ms_sum
    FROM attempts_hourly
    WHERE hour >= {since:DateTime('UTC')} AND hour < {until:DateTime('UTC')}
    GROUP BY tenant, channel, result
)
WHERE attempts > 0
ORDER BY tenant, channel, result
