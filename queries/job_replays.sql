-- A replay's statements go in one pipeline (BEGIN, the lookup, the source
-- lock, the second lookup, the classification read, the insert, COMMIT).
-- Each later statement is guarded by the data the earlier ones found or
-- wrote, not by session state, so that each is correct on whatever
-- connection runs it (on Citus, the tenant's worker node): the source lock
-- and the insert run only while no lineage exists for the request, and
-- the insert only for a source it can lock while eligible.

-- JobReplayGetForRequest opens a replay attempt. It always returns one row:
-- the transaction's isolation and, under READ COMMITTED only, the lineage
-- of the request (source, run, key) in the caller's tenant. When the stored
-- reason equals @reason it locks the replay job FOR NO KEY UPDATE (workers'
-- SKIP LOCKED claims pass it by); otherwise it locks nothing. LEFT JOINs of
-- CTEs, not LATERAL, so that sqlc types the columns nullable.
-- name: JobReplayGetForRequest :one
WITH lineage AS (
    SELECT jr.replay_job_id, jr.reason
    FROM job_replays jr
    WHERE jr.organization_id = @organization_id
      AND jr.source_job_id = @source_job_id
      AND jr.source_run_number = @source_run_number
      AND jr.replay_request_key = @replay_request_key
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
),
matching_replay AS (
    SELECT id, status, run_number
    FROM job_queue
    WHERE organization_id = @organization_id
      AND id IN (SELECT replay_job_id FROM lineage WHERE reason = @reason)
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

-- JobReplayGetForRequestAfterSourceLock is JobReplayGetForRequest's lookup
-- and replay lock without the probe, in a snapshot of its own taken after
-- the source lock's wait: it sees the lineage a previous holder of the
-- source committed. No row when there is no lineage, or under a refused
-- isolation level.
-- name: JobReplayGetForRequestAfterSourceLock :one
WITH lineage AS (
    SELECT jr.replay_job_id, jr.reason
    FROM job_replays jr
    WHERE jr.organization_id = @organization_id
      AND jr.source_job_id = @source_job_id
      AND jr.source_run_number = @source_run_number
      AND jr.replay_request_key = @replay_request_key
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
),
matching_replay AS (
    SELECT id, status, run_number
    FROM job_queue
    WHERE organization_id = @organization_id
      AND id IN (SELECT replay_job_id FROM lineage WHERE reason = @reason)
    FOR NO KEY UPDATE
)
SELECT lineage.replay_job_id,
       lineage.reason,
       matching_replay.status AS replay_status,
       matching_replay.run_number AS replay_run_number
FROM lineage
LEFT JOIN matching_replay ON matching_replay.id = lineage.replay_job_id;

-- JobReplayInsert creates, in one statement, the replay of a source: a
-- fresh job (type, organization, payload, priority, max_attempts,
-- timeout_seconds and execution_resource_key copied; run 1, PENDING,
-- queued, due now; nothing else copied), its one ENQUEUED event with the
-- provenance, and the lineage row, all in the source's tenant. It inserts
-- only for a source that is eligible (SUCCEEDED at @source_run_number, in
-- no workflow step) and has no lineage for the request, and locks it FOR
-- NO KEY UPDATE itself (held already when the pipeline's locking read took
-- it); so after a lineage hit, a mismatch or a NotFound it writes nothing.
-- The job type's definition is read FOR SHARE, so a definition change
-- waits; no row, and nothing written, when it is missing or disabled.
-- The workers' wake-up is a statement of its own (WorkerNotifyDue).
-- The event names @operator only when it is set (a NULL is stripped).
-- Citus runs it in steps through the coordinator: there the library sends
-- JobReplaySourceRouted in its place, then JobReplayJobRouted,
-- JobEventReplayEnqueued and JobReplayLineageRouted.
-- name: JobReplayInsert :one
WITH clock AS (
    SELECT now() AS now
),
source AS (
    SELECT s.id, s.run_number, s.job_type, s.organization_id, s.payload, s.priority,
           s.max_attempts, s.timeout_seconds, s.execution_resource_key
    FROM job_queue s
    JOIN job_definitions d ON d.job_type = s.job_type AND d.is_enabled
    WHERE s.organization_id = @organization_id
      AND s.id = @source_job_id
      AND s.status = 'SUCCEEDED'
      AND s.run_number = @source_run_number
      AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                      WHERE ws.organization_id = @organization_id AND ws.job_id = s.id)
      AND NOT EXISTS (SELECT 1 FROM job_replays jr
                      WHERE jr.organization_id = @organization_id AND jr.source_job_id = s.id
                        AND jr.source_run_number = @source_run_number AND jr.replay_request_key = @replay_request_key::text)
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
    FOR NO KEY UPDATE OF s
    FOR SHARE OF d
),
inserted AS (
    INSERT INTO job_queue (
        id, job_type, organization_id, payload, priority, max_attempts,
        timeout_seconds, next_run_at, stage, execution_resource_key
    )
    SELECT @replay_job_id, job_type, organization_id, payload, priority, max_attempts,
           timeout_seconds, clock.now, 'queued', execution_resource_key
    FROM source CROSS JOIN clock
    RETURNING id, job_type, organization_id, status, run_number, stage
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
    SELECT inserted.organization_id, inserted.id, inserted.run_number, 'ENQUEUED', inserted.stage,
           jsonb_strip_nulls(jsonb_build_object(
               'job_type', inserted.job_type,
               'replayed_from_job_id', source.id,
               'replayed_from_run_number', source.run_number,
               'replay_request_key', @replay_request_key::text,
               'reason', @reason::text,
               'operator', sqlc.narg(operator)::text))
    FROM inserted CROSS JOIN source
    RETURNING id
),
lineage AS (
    INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
    SELECT source.organization_id, source.id, source.run_number, @replay_request_key::text, inserted.id, @reason::text
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

-- JobReplaySourceRouted is JobReplayInsert's first part on Citus, where
-- JobReplayInsert runs in steps through the coordinator: the source, locked
-- FOR NO KEY UPDATE, and its job type's definition, read FOR SHARE (a
-- definition change waits until the transaction ends), under the same
-- guards as JobReplayInsert's (the source SUCCEEDED at @source_run_number,
-- in no workflow step, without lineage for the request, the definition
-- enabled, READ COMMITTED), with what the replay copies from the source.
-- It stands where JobReplayInsert stands in the replay's pipeline; when it
-- returns a row, the caller writes, in the same transaction, the replay
-- job (JobReplayJobRouted, with the source's settings), its event
-- (JobEventReplayEnqueued) and the lineage (JobReplayLineageRouted). No row,
-- and nothing locked, where JobReplayInsert would write nothing. One step
-- on the tenant's shard.
-- name: JobReplaySourceRouted :one
SELECT s.id, s.run_number, s.job_type, s.payload, s.priority,
       s.max_attempts, s.timeout_seconds, s.execution_resource_key
FROM job_queue s
JOIN job_definitions d ON d.job_type = s.job_type AND d.is_enabled
WHERE s.organization_id = @organization_id
  AND s.id = @source_job_id
  AND s.status = 'SUCCEEDED'
  AND s.run_number = @source_run_number
  AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                  WHERE ws.organization_id = @organization_id AND ws.job_id = s.id)
  AND NOT EXISTS (SELECT 1 FROM job_replays jr
                  WHERE jr.organization_id = @organization_id AND jr.source_job_id = s.id
                    AND jr.source_run_number = @source_run_number AND jr.replay_request_key = @replay_request_key::text)
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
FOR NO KEY UPDATE OF s
FOR SHARE OF d;

-- JobReplayJobRouted inserts the replay job JobReplaySourceRouted allowed,
-- as JobReplayInsert does: @replay_job_id (fresh), with the source's type,
-- payload, priority, max_attempts, timeout_seconds and
-- execution_resource_key as that statement returned them; run 1, PENDING,
-- queued, due now. A plain INSERT ... VALUES: one step on Citus.
-- name: JobReplayJobRouted :one
INSERT INTO job_queue (
    id, job_type, organization_id, payload, priority, max_attempts,
    timeout_seconds, next_run_at, stage, execution_resource_key
)
VALUES (@replay_job_id, @job_type, @organization_id, @payload::jsonb, @priority::int, @max_attempts::int,
        @timeout_seconds::int, now(), 'queued', sqlc.narg(execution_resource_key)::text)
RETURNING id, status, run_number, stage;

-- JobEventReplayEnqueued writes the ENQUEUED event of a replay job
-- (@job_id, at its run and stage as inserted) with the provenance
-- JobReplayInsert records: the job type, the source and its run, the
-- request key and reason, and @operator only when it is set. It reads no
-- table: one step on Citus.
-- name: JobEventReplayEnqueued :execrows
INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
VALUES (@organization_id, @job_id, @run_number::int, 'ENQUEUED', @stage::text,
        jsonb_strip_nulls(jsonb_build_object(
            'job_type', @job_type::text,
            'replayed_from_job_id', @source_job_id::uuid,
            'replayed_from_run_number', @source_run_number::int,
            'replay_request_key', @replay_request_key::text,
            'reason', @reason::text,
            'operator', sqlc.narg(operator)::text)));

-- JobReplayLineageRouted writes the lineage row of a replay (the source,
-- its run, the request key, the replay job and the reason), as
-- JobReplayInsert does; the lineage key refuses a second replay of the
-- request (a unique violation). A plain INSERT ... VALUES: one step on
-- Citus.
-- name: JobReplayLineageRouted :execrows
INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
VALUES (@organization_id, @source_job_id, @source_run_number::int, @replay_request_key::text, @replay_job_id, @reason::text);

-- JobReplayListForSource lists the replays made from a job, oldest first,
-- with each replay's current status and run, within the caller's tenant (a
-- replay always shares its source's tenant), at most @max_replays;
-- with @after_replay_job_id set, only the replays after that one (the next
-- page). No locks.
-- name: JobReplayListForSource :many
SELECT sqlc.embed(jr), replay.status AS replay_status, replay.run_number AS replay_run_number
FROM job_replays jr
JOIN job_queue replay ON replay.organization_id = @organization_id AND replay.id = jr.replay_job_id
WHERE jr.organization_id = @organization_id
  AND jr.source_job_id = @source_job_id
  AND (sqlc.narg(after_replay_job_id)::uuid IS NULL
       OR (jr.created_at, jr.replay_job_id) > (SELECT after.created_at, after.replay_job_id
                                               FROM job_replays after
                                               WHERE after.organization_id = @organization_id
                                                 AND after.replay_job_id = sqlc.narg(after_replay_job_id)::uuid))
ORDER BY jr.created_at, jr.replay_job_id
LIMIT @max_replays;

-- JobReplayGetForReplayJob returns the lineage row of a replay job: the source
-- it was made from, the run, key and reason, within the caller's tenant. No
-- row when the job is not a replay or is outside the tenant. No locks.
-- name: JobReplayGetForReplayJob :one
SELECT sqlc.embed(jr)
FROM job_replays jr
WHERE jr.organization_id = @organization_id
  AND jr.replay_job_id = @replay_job_id;
