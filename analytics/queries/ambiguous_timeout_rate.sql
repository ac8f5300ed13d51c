-- Ambiguous-timeout rate per tenant and channel between `since` and `until`
-- (whole hours): the share of provider calls that timed out after the
-- request may have reached the provider. herald retries them with the same
-- collapse ids, so the device shows one notification, but a rising rate is
-- a provider or network problem.
-- Parameters: since DateTime('UTC'), until DateTime('UTC').
SELECT
    tenant,
    channel,
    ambiguous,
    total AS attempts,
    ambiguous / total AS ambiguous_rate
FROM
(
    SELECT tenant, channel, sumIf(attempts, result = 'ambiguous') AS ambiguous, sum(attempts) AS total
    FROM attempts_hourly
    WHERE hour >= {since:DateTime('UTC')} AND hour < {until:DateTime('UTC')}
    GROUP BY tenant, channel
)
WHERE total > 0
ORDER BY tenant, channel
