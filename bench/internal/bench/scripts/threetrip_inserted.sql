-- The three-round-trip pipeline this project sent before every outcome
-- became one round trip, kept as a baseline: do not edit.
--
-- This project's protocol, inserted path: 3 round trips, [BEGIN + lineage lookup], [source lock +
-- second lookup + classification read], [insert + COMMIT].
\set i random(1, :sources)
\set k random(1, 9000000000000000000)
\set tok random(1, 2000000000)
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
      AND jr.replay_request_key = :k
      AND source.organization_id IS NOT DISTINCT FROM :org::uuid
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
),
matching_replay AS (
    SELECT id, status, run_number
    FROM job_queue
    WHERE id IN (SELECT replay_job_id FROM lineage WHERE reason = :reason)
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
-- JobLockForReplay
WITH locked AS MATERIALIZED (
    SELECT id, run_number, job_type, execution_resource_key,
           EXISTS (SELECT 1 FROM workflow_steps ws WHERE ws.job_id = job_queue.id) AS workflow_managed
    FROM job_queue
    WHERE job_queue.id = runledger_bench_id(:i)
      AND organization_id IS NOT DISTINCT FROM :org::uuid
      AND status = 'SUCCEEDED'
      AND run_number = :run
      AND NOT EXISTS (SELECT 1 FROM workflow_steps ws WHERE ws.job_id = job_queue.id)
    FOR NO KEY UPDATE
)
SELECT locked.id,
       locked.run_number,
       locked.job_type,
       locked.execution_resource_key,
       locked.workflow_managed,
       set_config('runledger.replay_source_lock', :tok::text, true) AS lock_token
FROM locked;
-- JobReplayGetForRequestAfterSourceLock
WITH lineage AS (
    SELECT jr.replay_job_id, jr.reason
    FROM job_replays jr
    JOIN job_queue source ON source.id = jr.source_job_id
    WHERE jr.source_job_id = runledger_bench_id(:i)
      AND jr.source_run_number = :run
      AND jr.replay_request_key = :k
      AND source.organization_id IS NOT DISTINCT FROM :org::uuid
      AND current_setting('runledger.replay_source_lock', true) = :tok::text
),
matching_replay AS (
    SELECT id, status, run_number
    FROM job_queue
    WHERE id IN (SELECT replay_job_id FROM lineage WHERE reason = :reason)
    FOR NO KEY UPDATE
)
SELECT lineage.replay_job_id,
       lineage.reason,
       matching_replay.status AS replay_status,
       matching_replay.run_number AS replay_run_number
FROM lineage
LEFT JOIN matching_replay ON matching_replay.id = lineage.replay_job_id;
-- JobGetForReplayClassification
SELECT job_queue.status,
       job_queue.run_number,
       EXISTS (SELECT 1 FROM workflow_steps ws WHERE ws.job_id = job_queue.id) AS workflow_managed,
       (to_jsonb(job_queue) || jsonb_build_object(
           'next_run_at', (to_jsonb(next_run_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'lease_expires_at', (to_jsonb(lease_expires_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'last_heartbeat_at', (to_jsonb(last_heartbeat_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'started_at', (to_jsonb(started_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'finished_at', (to_jsonb(finished_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'created_at', (to_jsonb(created_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'updated_at', (to_jsonb(updated_at AT TIME ZONE 'UTC') #>> '{}') || 'Z'))::jsonb AS job
FROM job_queue
WHERE job_queue.id = runledger_bench_id(:i)
  AND organization_id IS NOT DISTINCT FROM :org::uuid
  AND current_setting('runledger.replay_source_lock', true) IS DISTINCT FROM :tok::text;
\endpipeline
\startpipeline
-- JobReplayInsert
WITH source AS (
    SELECT s.id, s.run_number, s.job_type, s.organization_id, s.payload, s.priority,
           s.max_attempts, s.timeout_seconds, s.execution_resource_key
    FROM job_queue s
    JOIN job_definitions d ON d.job_type = s.job_type AND d.is_enabled
    WHERE s.id = runledger_bench_id(:i)
    FOR SHARE OF d
),
inserted AS (
    INSERT INTO job_queue (
        id, job_type, organization_id, payload, priority, max_attempts,
        timeout_seconds, next_run_at, stage, execution_resource_key
    )
    SELECT runledger_bench_new_id(), job_type, organization_id, payload, priority, max_attempts,
           timeout_seconds, now(), 'queued', execution_resource_key
    FROM source
    RETURNING id, job_type, organization_id, status, run_number, stage
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
    SELECT inserted.organization_id, inserted.id, inserted.run_number, 'ENQUEUED', inserted.stage,
           jsonb_strip_nulls(jsonb_build_object(
               'job_type', inserted.job_type,
               'replayed_from_job_id', source.id,
               'replayed_from_run_number', source.run_number,
               'replay_request_key', :k::text,
               'reason', :reason::text))
    FROM inserted CROSS JOIN source
    RETURNING id
),
lineage AS (
    INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
    SELECT source.organization_id, source.id, source.run_number, :k::text, inserted.id, :reason::text
    FROM inserted CROSS JOIN source
    RETURNING replay_job_id
)
SELECT inserted.id,
       inserted.status,
       inserted.run_number,
       source.id AS source_job_id,
       source.run_number AS source_run_number,
       (SELECT count(*) FROM event) AS event_count,
       (SELECT count(*) FROM lineage) AS lineage_count
FROM inserted CROSS JOIN source;
-- TransactionCommit
COMMIT;
\endpipeline
