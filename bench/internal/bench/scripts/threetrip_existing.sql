-- The three-round-trip pipeline this project sent before every outcome
-- became one round trip, kept as a baseline: do not edit.
--
-- This project's protocol, existing path (an idempotent retry): 2 round trips, [BEGIN + lineage
-- lookup, which finds the replay and locks it], [COMMIT].
\set i random(1, :sources)
\set run 1
\startpipeline
-- TransactionBeginReadCommitted
BEGIN ISOLATION LEVEL READ COMMITTED;
-- JobReplayGetForRequest
WITH lineage AS (
    SELECT jr.replay_job_id, jr.reason
    FROM job_replays jr
    JOIN job_queue source ON source.id = jr.source_job_id
    WHERE jr.source_job_id = runledger_bench_id(:i)
      AND jr.source_run_number = :run
      AND jr.replay_request_key = :seed
      AND source.organization_id IS NOT DISTINCT FROM :org::uuid
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
),
matching_replay AS (
    SELECT id, status, run_number
    FROM job_queue
    WHERE id IN (SELECT replay_job_id FROM lineage WHERE reason = :seed)
    FOR NO KEY UPDATE
)
SELECT probe.isolation,
       lineage.replay_job_id,
       lineage.reason,
       matching_replay.status AS replay_status,
       matching_replay.run_number AS replay_run_number
FROM (SELECT current_setting('transaction_isolation')::text AS isolation) AS probe
LEFT JOIN lineage ON true
LEFT JOIN matching_replay ON matching_replay.id = lineage.replay_job_id;
\endpipeline
\startpipeline
-- TransactionCommit
COMMIT;
\endpipeline
