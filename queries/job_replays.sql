-- JobReplayGetForRequest opens a replay attempt. It always returns one row:
-- the transaction's isolation and, under READ COMMITTED only, the lineage of
-- the request (source, run, key; the source in the caller's scope,
-- null-safe). When the stored reason equals @reason it locks the replay job
-- FOR NO KEY UPDATE (workers' SKIP LOCKED claims pass it by); otherwise it
-- locks nothing. It sets the transaction-local marker runledger.replay
-- that guards the statements behind it: '<token>/missing' lets the source
-- lock run; '<token>/found' and '<token>/refused' turn them all off. LEFT
-- JOINs of CTEs, not LATERAL, so that sqlc types the columns nullable.
-- name: JobReplayGetForRequest :one
WITH lineage AS (
    SELECT jr.replay_job_id, jr.reason
    FROM job_replays jr
    JOIN job_queue source ON source.id = jr.source_job_id
    WHERE jr.source_job_id = @source_job_id
      AND jr.source_run_number = @source_run_number
      AND jr.replay_request_key = @replay_request_key
      AND source.organization_id IS NOT DISTINCT FROM sqlc.narg(organization_id)::uuid
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
),
matching_replay AS (
    SELECT id, status, run_number
    FROM job_queue
    WHERE id IN (SELECT replay_job_id FROM lineage WHERE reason = @reason)
    FOR NO KEY UPDATE
)
SELECT probe.isolation,
       lineage.replay_job_id,
       lineage.reason,
       matching_replay.status AS replay_status,
       matching_replay.run_number AS replay_run_number,
       set_config('runledger.replay', @token::text || CASE
           WHEN lower(probe.isolation) NOT IN ('read committed', 'read uncommitted') THEN '/refused'
           WHEN lineage.replay_job_id IS NOT NULL THEN '/found'
           ELSE '/missing' END, true) AS marker
FROM (SELECT current_setting('transaction_isolation')::text AS isolation) AS probe
LEFT JOIN lineage ON true
LEFT JOIN matching_replay ON matching_replay.id = lineage.replay_job_id;

-- JobReplayGetForRequestAfterSourceLock is JobReplayGetForRequest's lookup
-- and replay lock without the probe, run only when this attempt's locking
-- read took the source (runledger.replay is '<token>/locked'). Its own
-- snapshot, taken after the lock wait, sees the lineage the previous lock
-- holder committed. A row sets '<token>/found', which turns the insert
-- off. No row when there is no lineage or it was guarded off.
-- name: JobReplayGetForRequestAfterSourceLock :one
WITH lineage AS (
    SELECT jr.replay_job_id, jr.reason
    FROM job_replays jr
    JOIN job_queue source ON source.id = jr.source_job_id
    WHERE jr.source_job_id = @source_job_id
      AND jr.source_run_number = @source_run_number
      AND jr.replay_request_key = @replay_request_key
      AND source.organization_id IS NOT DISTINCT FROM sqlc.narg(organization_id)::uuid
      AND current_setting('runledger.replay', true) = @token::text || '/locked'
),
matching_replay AS (
    SELECT id, status, run_number
    FROM job_queue
    WHERE id IN (SELECT replay_job_id FROM lineage WHERE reason = @reason)
    FOR NO KEY UPDATE
)
SELECT lineage.replay_job_id,
       lineage.reason,
       matching_replay.status AS replay_status,
       matching_replay.run_number AS replay_run_number,
       set_config('runledger.replay', @token::text || '/found', true) AS marker
FROM lineage
LEFT JOIN matching_replay ON matching_replay.id = lineage.replay_job_id;

-- JobReplayInsert creates, in one statement, the replay of a source the
-- caller has locked: a fresh job (type, organization, payload, priority,
-- max_attempts, timeout_seconds and execution_resource_key copied; run 1,
-- PENDING, queued, due now; nothing else copied), its one ENQUEUED event
-- with the provenance, and the lineage row. The job type's definition is
-- read FOR SHARE, so a definition change waits; no row, and nothing
-- written, when it is missing or disabled. It runs only while
-- runledger.replay is '<token>/locked' (this attempt locked the source and
-- found no lineage after the lock); guarded off it reads nothing. With
-- @notify set, the new job sends pg_notify on runledger_job_due (its job
-- type as payload), heard by workers when the transaction commits.
-- name: JobReplayInsert :one
WITH source AS (
    SELECT s.id, s.run_number, s.job_type, s.organization_id, s.payload, s.priority,
           s.max_attempts, s.timeout_seconds, s.execution_resource_key
    FROM job_queue s
    JOIN job_definitions d ON d.job_type = s.job_type AND d.is_enabled
    WHERE s.id = @source_job_id
      AND current_setting('runledger.replay', true) = @token::text || '/locked'
    FOR SHARE OF d
),
inserted AS (
    INSERT INTO job_queue (
        id, job_type, organization_id, payload, priority, max_attempts,
        timeout_seconds, next_run_at, stage, execution_resource_key
    )
    SELECT @replay_job_id, job_type, organization_id, payload, priority, max_attempts,
           timeout_seconds, now(), 'queued', execution_resource_key
    FROM source
    RETURNING id, job_type, status, run_number, stage
),
event AS (
    INSERT INTO job_events (job_id, run_number, event_type, stage, payload)
    SELECT inserted.id, inserted.run_number, 'ENQUEUED', inserted.stage,
           jsonb_strip_nulls(jsonb_build_object(
               'job_type', inserted.job_type,
               'replayed_from_job_id', source.id,
               'replayed_from_run_number', source.run_number,
               'replay_request_key', @replay_request_key::text,
               'reason', @reason::text))
    FROM inserted CROSS JOIN source
    RETURNING id
),
lineage AS (
    INSERT INTO job_replays (source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
    SELECT source.id, source.run_number, @replay_request_key::text, inserted.id, @reason::text
    FROM inserted CROSS JOIN source
    RETURNING replay_job_id
),
notified AS (
    SELECT pg_notify('runledger_job_due', job_type) FROM inserted WHERE @notify::bool
)
SELECT inserted.id,
       inserted.status,
       inserted.run_number,
       source.id AS source_job_id,
       source.run_number AS source_run_number,
       (SELECT count(*) FROM event) AS event_count,
       (SELECT count(*) FROM lineage) AS lineage_count,
       (SELECT count(*) FROM notified) AS notified_count
FROM inserted CROSS JOIN source;

-- JobReplayListForSource lists the replays made from a job, oldest first,
-- with each replay's current status and run, within the caller's scope (a
-- replay always shares its source's organization), at most @max_replays;
-- with @after_replay_job_id set, only the replays after that one (the next
-- page). No locks.
-- name: JobReplayListForSource :many
SELECT sqlc.embed(jr), replay.status AS replay_status, replay.run_number AS replay_run_number
FROM job_replays jr
JOIN job_queue replay ON replay.id = jr.replay_job_id
WHERE jr.source_job_id = @source_job_id
  AND replay.organization_id IS NOT DISTINCT FROM sqlc.narg(organization_id)::uuid
  AND (sqlc.narg(after_replay_job_id)::uuid IS NULL
       OR (jr.created_at, jr.replay_job_id) > (SELECT after.created_at, after.replay_job_id
                                               FROM job_replays after
                                               WHERE after.replay_job_id = sqlc.narg(after_replay_job_id)::uuid))
ORDER BY jr.created_at, jr.replay_job_id
LIMIT @max_replays;

-- JobReplayGetForReplayJob returns the lineage row of a replay job: the source
-- it was made from, the run, key and reason, within the caller's scope. No
-- row when the job is not a replay or is outside the scope. No locks.
-- name: JobReplayGetForReplayJob :one
SELECT jr.replay_job_id, jr.source_job_id, jr.source_run_number, jr.replay_request_key,
       jr.reason, jr.created_at
FROM job_replays jr
JOIN job_queue source ON source.id = jr.source_job_id
WHERE jr.replay_job_id = @replay_job_id
  AND source.organization_id IS NOT DISTINCT FROM sqlc.narg(organization_id)::uuid;
