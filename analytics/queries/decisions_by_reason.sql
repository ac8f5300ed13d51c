-- Decisions of every stage by reason between `since` and `until` (whole
-- hours), per tenant: how many requests each stage accepted, and why it
-- skipped the others (duplicate, idempotent_replay, idempotency_conflict,
-- rate_limited, digested, opted_out, deferred, no_target, ...).
-- Parameters: since DateTime('UTC'), until DateTime('UTC').
SELECT
    tenant,
    stage,
    outcome AS reason,
    sum(decisions) AS decisions
FROM decisions_hourly
WHERE hour >= {since:DateTime('UTC')} AND hour < {until:DateTime('UTC')}
GROUP BY tenant, stage, reason
HAVING decisions > 0
ORDER BY tenant, stage, decisions DESC, reason
