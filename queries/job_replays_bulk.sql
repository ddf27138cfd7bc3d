-- Bulk compare-and-replay: the statements of one chunk of sources, each
-- set-based over arrays of the chunk's sources. A chunk runs them in one
-- READ COMMITTED transaction: JobReplayBulkLockSources, then
-- JobReplayBulkInsert for the sources it locked and
-- JobGetForBulkReplayClassification for the others. On Citus, which runs
-- JobReplayBulkInsert in steps through the coordinator, the library sends
-- JobEnqueueManyDefinitionsRouted and JobReplayBulkSourcesRouted in its
-- place, then JobReplayBulkJobsRouted, JobEventReplayEnqueuedMany and
-- JobReplayBulkLineageRouted in a round trip of their own.

-- JobReplayBulkLockSources is the single replay's lineage lookup and
-- source lock for a chunk of sources (@source_job_ids with their expected
-- runs @source_run_numbers, no id twice), in one statement. It returns one
-- row per source, in the order given: the lineage of (source, run,
-- @replay_request_key) in the caller's tenant, if any, with its reason;
-- and whether the source was locked, with its job type. Only a source
-- without that lineage is locked, and only while it is eligible: in the
-- tenant, SUCCEEDED at the expected run, in no workflow step. The locks are FOR NO KEY UPDATE and taken in id order,
-- so chunks over overlapping sources (and single replays, which lock one
-- source) wait for each other instead of deadlocking; a waiter re-checks
-- the conditions on the newest row. A caller's transaction that locks
-- two of these sources in another order, or a definition before a source
-- (JobReplayBulkInsert reads definitions FOR SHARE after this), can still
-- deadlock with a chunk. Replay jobs are not locked: a bulk
-- result reports no replay status that a lock would have to keep true.
-- (The lineage probe is a correlated subquery, so that it reads the
-- idempotency index once per source whatever the planner guesses of the
-- arrays' length.)
-- name: JobReplayBulkLockSources :many
WITH input AS (
    SELECT i.source_job_id, (@source_run_numbers::int[])[i.ord] AS source_run_number, i.ord
    FROM unnest(@source_job_ids::uuid[]) WITH ORDINALITY AS i(source_job_id, ord)
),
lineage AS MATERIALIZED (
    SELECT input.source_job_id, input.source_run_number, input.ord,
           (SELECT jr.replay_job_id
            FROM job_replays jr
            WHERE jr.organization_id = @organization_id
              AND jr.source_job_id = input.source_job_id
              AND jr.source_run_number = input.source_run_number
              AND jr.replay_request_key = @replay_request_key) AS replay_job_id,
           (SELECT jr.reason
            FROM job_replays jr
            WHERE jr.organization_id = @organization_id
              AND jr.source_job_id = input.source_job_id
              AND jr.source_run_number = input.source_run_number
              AND jr.replay_request_key = @replay_request_key) AS reason
    FROM input
),
found AS (
    SELECT ord, replay_job_id, reason FROM lineage WHERE replay_job_id IS NOT NULL
),
-- Each source is looked up and locked by its key in a lateral subquery,
-- the sources in id order: joined with the sources, a tenant the
-- statistics did not know was read whole through the key's tenant prefix
-- (TestHotPlansStayBounded).
locked AS MATERIALIZED (
    SELECT l.id, l.job_type
    FROM (SELECT source_job_id, source_run_number FROM lineage
          WHERE replay_job_id IS NULL ORDER BY source_job_id) s
    CROSS JOIN LATERAL (
        SELECT jq.id, jq.job_type
        FROM job_queue jq
        WHERE jq.organization_id = @organization_id
          AND jq.id = s.source_job_id
          AND jq.run_number = s.source_run_number
          AND jq.status::text = 'SUCCEEDED'
          AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                          WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id)
        FOR NO KEY UPDATE OF jq
    ) l
)
SELECT lineage.source_job_id::uuid AS source_job_id,
       lineage.source_run_number::int AS source_run_number,
       found.replay_job_id,
       found.reason,
       (locked.id IS NOT NULL)::bool AS locked,
       locked.job_type
FROM lineage
LEFT JOIN found ON found.ord = lineage.ord
LEFT JOIN locked ON locked.id = lineage.source_job_id
ORDER BY lineage.ord;

-- JobReplayBulkInsert is the single replay's second lookup and insert for
-- the sources a chunk locked (@source_job_ids at @source_run_numbers, each
-- with the id @replay_job_ids gives its replay), in one statement whose
-- snapshot is taken after the lock waits: it sees the lineage of a replay
-- that held a source before. A source with that lineage gets no replay and
-- its row reports the lineage; every other source whose job type's
-- definition exists and is enabled (@job_types, the locked sources' types,
-- read FOR SHARE in job type order, so a definition change waits) gets
-- what JobReplayInsert writes: a fresh job
-- (type, organization, payload, priority, max_attempts, timeout_seconds
-- and execution_resource_key copied; run 1, PENDING, queued, due now), its
-- one ENQUEUED event with the five-key provenance, and the lineage row. A
-- source of a missing or disabled definition gets nothing and a row with
-- neither lineage nor replay. The ENQUEUED event is written from the
-- source beside the job (run 1, stage queued: what the insert sets, which
-- the counts check), not joined to the inserted rows. One row per source,
-- in the order given, with the counts of what was written for a check.
-- The workers' wake-up is a statement of its own (WorkerNotifyDue). (Every
-- lineage probe is a correlated subquery, so that it reads the
-- idempotency index once per source whatever the planner guesses of the
-- arrays' length.)
-- Each event names @operator only when it is set (a NULL is stripped).
-- name: JobReplayBulkInsert :many
WITH locked AS (
    SELECT l.source_job_id, (@source_run_numbers::int[])[l.ord] AS source_run_number,
           (@replay_job_ids::uuid[])[l.ord] AS replay_job_id, l.ord
    FROM unnest(@source_job_ids::uuid[]) WITH ORDINALITY AS l(source_job_id, ord)
),
checked AS MATERIALIZED (
    SELECT locked.source_job_id, locked.source_run_number, locked.replay_job_id, locked.ord,
           (SELECT jr.replay_job_id
            FROM job_replays jr
            WHERE jr.organization_id = @organization_id
              AND jr.source_job_id = locked.source_job_id
              AND jr.source_run_number = locked.source_run_number
              AND jr.replay_request_key = @replay_request_key) AS existing_replay_job_id,
           (SELECT jr.reason
            FROM job_replays jr
            WHERE jr.organization_id = @organization_id
              AND jr.source_job_id = locked.source_job_id
              AND jr.source_run_number = locked.source_run_number
              AND jr.replay_request_key = @replay_request_key) AS existing_reason
    FROM locked
),
found AS (
    SELECT ord, existing_replay_job_id, existing_reason FROM checked WHERE existing_replay_job_id IS NOT NULL
),
definition AS MATERIALIZED (
    SELECT d.job_type
    FROM job_definitions d
    WHERE d.is_enabled
      AND d.job_type = ANY(@job_types::text[])
    ORDER BY d.job_type
    FOR SHARE
),
clock AS (
    SELECT now() AS now
),
source AS MATERIALIZED (
    SELECT checked.replay_job_id AS new_id, s.id, s.run_number, s.job_type, s.organization_id, s.payload,
           s.priority, s.max_attempts, s.timeout_seconds, s.execution_resource_key
    FROM checked
    JOIN job_queue s ON s.organization_id = @organization_id
                    AND s.id = checked.source_job_id AND s.run_number = checked.source_run_number
    WHERE checked.existing_replay_job_id IS NULL
      AND s.job_type IN (SELECT job_type FROM definition)
),
inserted AS (
    INSERT INTO job_queue (
        id, job_type, organization_id, payload, priority, max_attempts,
        timeout_seconds, next_run_at, stage, execution_resource_key
    )
    SELECT new_id, job_type, organization_id, payload, priority, max_attempts,
           timeout_seconds, clock.now, 'queued', execution_resource_key
    FROM source CROSS JOIN clock
    ORDER BY new_id
    RETURNING id, status, run_number, stage
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
    SELECT source.organization_id, source.new_id, 1, 'ENQUEUED', 'queued',
           jsonb_strip_nulls(jsonb_build_object(
               'job_type', source.job_type,
               'replayed_from_job_id', source.id,
               'replayed_from_run_number', source.run_number,
               'replay_request_key', @replay_request_key::text,
               'reason', @reason::text,
               'operator', sqlc.narg(operator)::text))
    FROM source
    ORDER BY source.new_id
    RETURNING id
),
recorded AS (
    INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
    SELECT source.organization_id, source.id, source.run_number, @replay_request_key::text, source.new_id, @reason::text
    FROM source
    ORDER BY source.new_id
    RETURNING replay_job_id
)
SELECT checked.source_job_id::uuid AS source_job_id,
       checked.source_run_number::int AS source_run_number,
       found.existing_replay_job_id,
       found.existing_reason,
       (checked.replay_job_id IN (SELECT replay_job_id FROM recorded))::bool AS inserted,
       (SELECT count(*) FROM inserted) AS inserted_count,
       (SELECT count(*) FROM inserted WHERE status = 'PENDING' AND run_number = 1 AND stage = 'queued') AS pending_count,
       (SELECT count(*) FROM event) AS event_count,
       (SELECT count(*) FROM recorded) AS lineage_count
FROM checked
LEFT JOIN found ON found.ord = checked.ord
ORDER BY checked.ord;

-- JobReplayBulkSourcesRouted is JobReplayBulkInsert's second lookup on
-- Citus, where JobReplayBulkInsert runs in steps through the coordinator:
-- for the sources a chunk locked (@source_job_ids at
-- @source_run_numbers, locked by JobReplayBulkLockSources in the same
-- transaction), in a snapshot taken after those lock waits, the lineage
-- of the request a replay that held a source before committed, if any,
-- and what a replay copies from the source. One row per source, in the
-- order given. It locks nothing more: the library share-locks the
-- definitions with JobEnqueueManyDefinitionsRouted just before it and
-- writes the replays of the sources without lineage whose definition it
-- found with JobReplayBulkJobsRouted, JobEventReplayEnqueuedMany and
-- JobReplayBulkLineageRouted. One step on the tenant's shard.
-- name: JobReplayBulkSourcesRouted :many
WITH locked AS (
    SELECT l.source_job_id, (@source_run_numbers::int[])[l.ord] AS source_run_number, l.ord
    FROM unnest(@source_job_ids::uuid[]) WITH ORDINALITY AS l(source_job_id, ord)
),
checked AS MATERIALIZED (
    SELECT locked.source_job_id, locked.source_run_number, locked.ord,
           (SELECT jr.replay_job_id
            FROM job_replays jr
            WHERE jr.organization_id = @organization_id
              AND jr.source_job_id = locked.source_job_id
              AND jr.source_run_number = locked.source_run_number
              AND jr.replay_request_key = @replay_request_key) AS existing_replay_job_id,
           (SELECT jr.reason
            FROM job_replays jr
            WHERE jr.organization_id = @organization_id
              AND jr.source_job_id = locked.source_job_id
              AND jr.source_run_number = locked.source_run_number
              AND jr.replay_request_key = @replay_request_key) AS existing_reason
    FROM locked
),
found AS (
    SELECT ord, existing_replay_job_id, existing_reason FROM checked WHERE existing_replay_job_id IS NOT NULL
)
SELECT checked.source_job_id::uuid AS source_job_id,
       checked.source_run_number::int AS source_run_number,
       found.existing_replay_job_id,
       found.existing_reason,
       s.job_type, s.payload, s.priority, s.max_attempts, s.timeout_seconds, s.execution_resource_key
FROM checked
JOIN job_queue s ON s.organization_id = @organization_id
                AND s.id = checked.source_job_id AND s.run_number = checked.source_run_number
LEFT JOIN found ON found.ord = checked.ord
ORDER BY checked.ord;

-- JobReplayBulkJobsRouted inserts the replay jobs of a chunk on Citus
-- (@replay_job_ids, fresh, with, at the same position, the source's type,
-- payload, priority, max_attempts, timeout_seconds and resource key ('':
-- none) as JobReplayBulkSourcesRouted returned them), as
-- JobReplayBulkInsert does: run 1, PENDING, queued, due now, in id order.
-- It reads no table: Citus evaluates it on the coordinator and sends the
-- rows to the tenant's shard in one step.
-- name: JobReplayBulkJobsRouted :many
INSERT INTO job_queue (
    id, job_type, organization_id, payload, priority, max_attempts,
    timeout_seconds, next_run_at, stage, execution_resource_key
)
SELECT i.id, i.job_types, @organization_id::uuid, i.payloads,
       (@priorities::int[])[i.ord], (@max_attempts::int[])[i.ord], (@timeout_seconds::int[])[i.ord],
       now(), 'queued', NULLIF(i.execution_resource_keys, '')
FROM ROWS FROM (unnest(@replay_job_ids::uuid[]), unnest(@job_types::text[]), unnest(@payloads::jsonb[]), unnest(@execution_resource_keys::text[])) WITH ORDINALITY AS i(id, job_types, payloads, execution_resource_keys, ord)
ORDER BY i.id
RETURNING id, status, run_number, stage;

-- JobEventReplayEnqueuedMany writes the ENQUEUED event of each replay job
-- JobReplayBulkJobsRouted inserted (@replay_job_ids with, at the same
-- position, the job type, the source and its run), with the provenance
-- JobReplayBulkInsert records (@operator only when it is set), run 1,
-- stage queued, in id order. It reads no table: one step on Citus.
-- name: JobEventReplayEnqueuedMany :execrows
INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
SELECT @organization_id, e.id, 1, 'ENQUEUED', 'queued',
       jsonb_strip_nulls(jsonb_build_object(
           'job_type', e.job_types,
           'replayed_from_job_id', (@source_job_ids::uuid[])[e.ord],
           'replayed_from_run_number', (@source_run_numbers::int[])[e.ord],
           'replay_request_key', @replay_request_key::text,
           'reason', @reason::text,
           'operator', sqlc.narg(operator)::text))
FROM ROWS FROM (unnest(@replay_job_ids::uuid[]), unnest(@job_types::text[])) WITH ORDINALITY AS e(id, job_types, ord)
ORDER BY e.id;

-- JobReplayBulkLineageRouted writes the lineage rows of a chunk's replays
-- on Citus (@replay_job_ids with, at the same position, the source and
-- its run), as JobReplayBulkInsert does, in id order; the lineage key
-- refuses a second replay of a request. It reads no table: one step on
-- Citus.
-- name: JobReplayBulkLineageRouted :execrows
INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
SELECT @organization_id, (@source_job_ids::uuid[])[r.ord], (@source_run_numbers::int[])[r.ord],
       @replay_request_key::text, r.id, @reason::text
FROM unnest(@replay_job_ids::uuid[]) WITH ORDINALITY AS r(id, ord)
ORDER BY r.id;

-- JobGetForBulkReplayClassification reads, without any lock, the sources
-- of a chunk that had no lineage and were not locked (@ids), in the
-- caller's tenant: a source it returns no row for is NotFound;
-- the others are told apart by status, run and workflow membership. A
-- rejected source thus leaves no row lock behind.
-- name: JobGetForBulkReplayClassification :many
SELECT jq.id,
       jq.status,
       jq.run_number,
       EXISTS (SELECT 1 FROM workflow_steps ws
               WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id) AS workflow_managed
FROM job_queue jq
WHERE jq.organization_id = @organization_id
  AND jq.id = ANY(@ids::uuid[]);

-- JobListSucceededForReplay selects the next page of a bulk replay by
-- filter in one tenant: jobs of @job_type that are SUCCEEDED and finished
-- in [@since, @until), in finish order then id, after the cursor
-- (@after_finished_at, @after_id; NULLs for the first page), at most
-- @max_jobs. A NULL @since is open; a NULL @until is now(), the
-- transaction's start, returned as selection_until on every row so that
-- the action pins it and passes it to every later page: jobs that finish
-- while the action runs are never selected. A job that is itself a replay
-- made under @replay_request_key is never selected, so an action does not
-- replay the replays it made. A job without a finish time is never
-- selected. No lock: the chunk locks what it replays.
-- name: JobListSucceededForReplay :many
SELECT jq.id, jq.run_number, jq.finished_at::timestamptz AS finished_at,
       coalesce(sqlc.narg(until)::timestamptz, now())::timestamptz AS selection_until
FROM job_queue jq
WHERE jq.job_type = @job_type
  AND jq.organization_id = @organization_id
  AND jq.status = 'SUCCEEDED'
  AND jq.finished_at >= coalesce(sqlc.narg(since)::timestamptz, '-infinity')
  AND jq.finished_at < coalesce(sqlc.narg(until)::timestamptz, now())
  AND (jq.finished_at, jq.id) > (coalesce(sqlc.narg(after_finished_at)::timestamptz, '-infinity'),
                                 coalesce(sqlc.narg(after_id)::uuid, '00000000-0000-0000-0000-000000000000'))
  AND (SELECT jr.replay_request_key FROM job_replays jr
       WHERE jr.organization_id = @organization_id AND jr.replay_job_id = jq.id)
      IS DISTINCT FROM @replay_request_key::text
ORDER BY jq.finished_at, jq.id
LIMIT @max_jobs;

-- JobCountSucceededForReplay counts what JobListSucceededForReplay would
-- select from the start under the same bounds (a NULL @until is now(), the
-- transaction's start: in the first page's transaction, the bound that
-- page pins), at most @max_jobs. It reads every selected job with its
-- lineage probe: the cost of a scan of the selection. No lock.
-- name: JobCountSucceededForReplay :one
SELECT count(*) FROM (
    SELECT 1
    FROM job_queue jq
    WHERE jq.job_type = @job_type
      AND jq.organization_id = @organization_id
      AND jq.status = 'SUCCEEDED'
      AND jq.finished_at >= coalesce(sqlc.narg(since)::timestamptz, '-infinity')
      AND jq.finished_at < coalesce(sqlc.narg(until)::timestamptz, now())
      AND (SELECT jr.replay_request_key FROM job_replays jr
           WHERE jr.organization_id = @organization_id AND jr.replay_job_id = jq.id)
          IS DISTINCT FROM @replay_request_key::text
    LIMIT @max_jobs
) selected;
