-- The reference protocol, mismatch path: one statement per round trip,
-- 6 round trips (BEGIN; SET TRANSACTION; lineage lookup; source lock, which
-- misses: the source is at run 1, not 2; classification read; COMMIT).
\set i random(1, :sources)
\set k random(1, 9000000000000000000)
\set run 2
BEGIN;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT jr.replay_job_id, replay.status::text AS replay_status, replay.run_number AS replay_run_number, jr.reason AS replay_reason
FROM job_replays jr
JOIN job_queue source ON source.id = jr.source_job_id
LEFT JOIN LATERAL (
    SELECT replay.status, replay.run_number
    FROM job_queue replay
    WHERE replay.id = jr.replay_job_id
      AND jr.reason = :reason
    FOR NO KEY UPDATE OF replay
) replay ON TRUE
WHERE jr.source_job_id = runledger_bench_id(:i)
  AND jr.source_run_number = :run
  AND jr.replay_request_key = :k
  AND source.organization_id IS NOT DISTINCT FROM :org::uuid;
SELECT id AS src_id, job_type AS src_job_type, organization_id AS src_org, payload AS src_payload,
       status::text AS src_status, priority AS src_priority, run_number AS src_run, attempt AS src_attempt,
       max_attempts AS src_max_attempts, timeout_seconds AS src_timeout, next_run_at AS src_next_run_at,
       lease_expires_at AS src_lease_expires_at, last_heartbeat_at AS src_last_heartbeat_at,
       worker_id AS src_worker_id, started_at AS src_started_at, finished_at AS src_finished_at,
       stage AS src_stage, progress_done AS src_progress_done, progress_total AS src_progress_total,
       progress_pct::float8 AS src_progress_pct, checkpoint AS src_checkpoint, output AS src_output,
       idempotency_key AS src_idempotency_key, status_reason AS src_status_reason,
       last_error_code AS src_last_error_code, last_error_message AS src_last_error_message,
       created_at AS src_created_at, updated_at AS src_updated_at,
       EXISTS (SELECT 1 FROM workflow_steps ws WHERE ws.job_id = job_queue.id) AS src_workflow_managed,
       execution_resource_key AS src_erk
FROM job_queue
WHERE id = runledger_bench_id(:i)
  AND organization_id IS NOT DISTINCT FROM :org::uuid
  AND status = 'SUCCEEDED'
  AND run_number = :run::int4
  AND NOT EXISTS (SELECT 1 FROM workflow_steps ws WHERE ws.job_id = job_queue.id)
FOR NO KEY UPDATE;
SELECT id, job_type, organization_id, payload, status::text, priority, run_number, attempt,
       max_attempts, timeout_seconds, next_run_at, lease_expires_at, last_heartbeat_at, worker_id,
       started_at, finished_at, stage, progress_done, progress_total, progress_pct::float8, checkpoint,
       output, idempotency_key, status_reason, last_error_code, last_error_message, created_at, updated_at,
       EXISTS (SELECT 1 FROM workflow_steps ws WHERE ws.job_id = job_queue.id) AS workflow_managed,
       execution_resource_key
FROM job_queue
WHERE id = runledger_bench_id(:i)
  AND organization_id IS NOT DISTINCT FROM :org::uuid;
COMMIT;
