-- Types whose dedup hit rate was 0% over the 7 days before `until`, among
-- those with at least `min_decisions` hits and misses: no repeat was ever
-- caught. Either producers never retry, or the dedupe keys are too narrow
-- (a timestamp or a request id in the key makes every send unique).
-- Parameters: until DateTime('UTC'), min_decisions UInt64.
SELECT
    tenant,
    type,
    misses AS accepted,
    idsources
FROM
(
    SELECT tenant, type, sum(duplicates + replays) AS hits, sum(accepted) AS misses
    FROM dedupe_hourly
    WHERE hour >= {until:DateTime('UTC')} - INTERVAL 7 DAY AND hour < {until:DateTime('UTC')}
    GROUP BY tenant, type
) AS r
LEFT JOIN
(
    -- How the ids were derived: "random" means the producer sent no key at
    -- all, so herald could not deduplicate.
    SELECT tenant, type, arrayStringConcat(arraySort(groupUniqArray(id_source)), ',') AS idsources
    FROM requests
    WHERE at >= {until:DateTime('UTC')} - INTERVAL 7 DAY AND at < {until:DateTime('UTC')} AND decode_error = ''
    GROUP BY tenant, type
) AS s USING (tenant, type)
WHERE hits = 0 AND misses >= {min_decisions:UInt64}
ORDER BY tenant, type
