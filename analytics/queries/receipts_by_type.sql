-- What web devices reported per tenant and type, for receipts herald
-- received between `since` and `until`, each counted once by receipt id (a
-- receipt a device sent twice counts once): displayed (notifications
-- shown), opened (clicked), dropped (repeats the device's seen-set dropped,
-- at most one per delivery), and open_rate = opened / displayed (NULL
-- without displayed). The type is the one the device reported (the push
-- payload's).
-- Parameters: since and until, DateTime('UTC'), e.g.
-- --param_since="2026-11-24 00:00:00" --param_until="2026-12-01 00:00:00".
SELECT
    tenant,
    type,
    uniqExactIf(receipt_id, kind = 'displayed') AS displayed,
    uniqExactIf(receipt_id, kind = 'opened') AS opened,
    uniqExactIf(receipt_id, kind = 'dropped') AS dropped,
    opened / nullIf(displayed, 0) AS open_rate
FROM receipts
WHERE decode_error = '' AND at >= {since:DateTime('UTC')} AND at < {until:DateTime('UTC')}
GROUP BY tenant, type
ORDER BY tenant, type
