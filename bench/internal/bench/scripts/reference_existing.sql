-- The reference protocol, existing path (an idempotent retry): one
-- statement per round trip, 4 round trips (BEGIN; SET TRANSACTION; lineage
-- lookup, which finds the replay and locks it; COMMIT).
\set i random(1, :sources)
\set run 1
BEGIN;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT jr.replay_job_id, replay.status::text AS replay_status, replay.run_number AS replay_run_number, jr.reason AS replay_reason
FROM job_replays jr
JOIN job_queue source ON source.id = jr.source_job_id
LEFT JOIN LATERAL (
    SELECT replay.status, replay.run_number
    FROM job_queue replay
    WHERE replay.id = jr.replay_job_id
      AND jr.reason = :seed
    FOR NO KEY UPDATE OF replay
) replay ON TRUE
WHERE jr.source_job_id = runledger_bench_id(:i)
  AND jr.source_run_number = :run
  AND jr.replay_request_key = :seed
  AND source.organization_id IS NOT DISTINCT FROM :org::uuid;
COMMIT;
