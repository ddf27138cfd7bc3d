-- Compare-and-requeue: a DEAD_LETTERED or CANCELED job goes back to
-- PENDING in place (same id, next run). A single requeue is one
-- statement, JobRequeue (with BEGIN and COMMIT when it owns its
-- transaction, and the workers' wake-up); a bulk chunk sends
-- JobRequeueBulk and JobGetForBulkRequeueClassification in one pipeline. Each
-- statement's guard is in the data, so that it is right on whatever
-- connection runs it (on Citus, the tenant's worker).

-- JobRequeue is a whole compare-and-requeue attempt in one statement. It
-- locks the job FOR NO KEY UPDATE while it is requeueable as the caller
-- observed it: in the caller's tenant, at @expected_status (DEAD_LETTERED
-- or CANCELED) and @expected_run_number, in no workflow step, and not a
-- CANCELED job whose lease is still live by the database clock (its
-- worker may still run). A waiter re-checks the conditions on the newest
-- row. It then advances the job to its next run in place: PENDING, stage
-- queued, due now, attempt 0; progress and checkpoint kept, or cleared
-- when @reset_progress; output, lease, heartbeat, worker, start, finish
-- and last error cleared; status_reason = @reason. Payload, settings,
-- idempotency key, enqueue request and execution resource key stay. It
-- writes one REQUEUED event on the job for the run that ended (attempt
-- NULL when none was made), whose payload records the reason, the state
-- policy and the requeue kind.
--
-- One row when it requeued (requeued true): the job after the requeue,
-- then (before_*) the columns the requeue changed as they were before it,
-- and the event. Otherwise nothing is written and nothing locked (but a
-- row that matched the snapshot and changed while this waited for its
-- lock stays locked), and the row, if the tenant has the job, classifies
-- the miss from the statement's snapshot (requeued false; before_* repeat
-- the job's columns): whether a workflow step owns the job, whether it is
-- a CANCELED job whose lease is still live, the reason of run
-- @expected_run_number's REQUEUED event if it was requeued, and the
-- status that run ended in (its latest DEAD_LETTERED or CANCELED event;
-- NULL when it has none). (Scalar subqueries, not a join: Citus plans no
-- outer join beside the one-time filter on requeued.) A job requeueable as observed in that
-- snapshot but not to the lock (it changed while this waited) is for the
-- caller's lock loop to try again. No row when the tenant has no such job.
-- The event names @operator only when it is set (a NULL is stripped).
-- name: JobRequeue :one
WITH clock AS (
    SELECT now() AS now
),
target AS (
    SELECT jq.organization_id, jq.id, jq.run_number, jq.attempt, jq.status, jq.stage, jq.progress_done,
           jq.progress_total, jq.progress_pct, jq.checkpoint, jq.output, jq.lease_expires_at, jq.last_heartbeat_at,
           jq.worker_id, jq.started_at, jq.finished_at, jq.next_run_at, jq.status_reason, jq.last_error_code,
           jq.last_error_message, jq.updated_at
    FROM job_queue jq
    WHERE jq.organization_id = @organization_id
      AND jq.id = @id
      AND jq.status IN ('DEAD_LETTERED', 'CANCELED')
      AND jq.status = @expected_status::job_status
      AND jq.run_number = @expected_run_number
      AND NOT (jq.status = 'CANCELED' AND jq.lease_expires_at IS NOT NULL AND jq.lease_expires_at > clock_timestamp())
      AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                      WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id)
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
    FOR NO KEY UPDATE OF jq
),
requeued AS (
    UPDATE job_queue
    SET updated_at = now(),
        status = 'PENDING',
        stage = 'queued',
        progress_done = (CASE WHEN @reset_progress::bool THEN NULL ELSE job_queue.progress_done END)::bigint,
        progress_total = (CASE WHEN @reset_progress::bool THEN NULL ELSE job_queue.progress_total END)::bigint,
        checkpoint = (CASE WHEN @reset_progress::bool THEN NULL ELSE job_queue.checkpoint END)::jsonb,
        output = NULL,
        run_number = job_queue.run_number + 1,
        attempt = 0,
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        started_at = NULL,
        finished_at = NULL,
        next_run_at = clock.now,
        status_reason = @reason::text,
        last_error_code = NULL,
        last_error_message = NULL
    FROM target, clock
    -- The job named by its whole key, not only through target: joined by
    -- id alone, a tenant the statistics did not know was read whole
    -- through the key's tenant prefix (TestHotPlansStayBounded).
    WHERE job_queue.organization_id = @organization_id
      AND job_queue.id = @id
      AND job_queue.id = target.id
    RETURNING job_queue.*
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, payload)
    SELECT target.organization_id, target.id, target.run_number, NULLIF(target.attempt, 0), 'REQUEUED',
           jsonb_strip_nulls(jsonb_build_object(
               'reason', @reason::text,
               'state_policy', @state_policy::text,
               'requeue_kind', 'COMPARE_AND_REQUEUE',
               'operator', sqlc.narg(operator)::text))
    FROM target
    RETURNING id
)
SELECT true AS requeued,
       requeued.*,
       target.status AS before_status,
       target.stage AS before_stage,
       target.run_number AS before_run_number,
       target.attempt AS before_attempt,
       target.progress_done AS before_progress_done,
       target.progress_total AS before_progress_total,
       target.progress_pct AS before_progress_pct,
       target.checkpoint AS before_checkpoint,
       target.output AS before_output,
       target.lease_expires_at AS before_lease_expires_at,
       target.last_heartbeat_at AS before_last_heartbeat_at,
       target.worker_id AS before_worker_id,
       target.started_at AS before_started_at,
       target.finished_at AS before_finished_at,
       target.next_run_at AS before_next_run_at,
       target.status_reason AS before_status_reason,
       target.last_error_code AS before_last_error_code,
       target.last_error_message AS before_last_error_message,
       target.updated_at AS before_updated_at,
       (SELECT id FROM event)::bigint AS event_id,
       (SELECT count(*) FROM event) AS event_count,
       false AS workflow_managed,
       false AS lease_live,
       NULL::text AS requeued_reason,
       NULL::text AS requeued_from
FROM requeued CROSS JOIN target
UNION ALL
SELECT false,
       jq.*,
       jq.status, jq.stage, jq.run_number, jq.attempt, jq.progress_done, jq.progress_total, jq.progress_pct,
       jq.checkpoint, jq.output, jq.lease_expires_at, jq.last_heartbeat_at, jq.worker_id, jq.started_at,
       jq.finished_at, jq.next_run_at, jq.status_reason, jq.last_error_code, jq.last_error_message, jq.updated_at,
       0::bigint,
       0::bigint,
       EXISTS (SELECT 1 FROM workflow_steps ws
               WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id),
       (jq.status = 'CANCELED' AND jq.lease_expires_at IS NOT NULL AND jq.lease_expires_at > clock_timestamp())::bool,
       (SELECT (e.payload ->> 'reason')::text
        FROM job_events e
        WHERE e.organization_id = @organization_id
          AND e.job_id = @id
          AND e.run_number = @expected_run_number
          AND e.event_type::text = 'REQUEUED'
        ORDER BY e.id
        LIMIT 1),
       (SELECT t.event_type::text
        FROM job_events t
        WHERE t.organization_id = @organization_id
          AND t.job_id = @id
          AND t.run_number = @expected_run_number
          AND t.event_type::text IN ('DEAD_LETTERED', 'CANCELED')
        ORDER BY t.id DESC
        LIMIT 1)
FROM job_queue jq
WHERE jq.organization_id = @organization_id
  AND jq.id = @id
  AND NOT EXISTS (SELECT 1 FROM requeued);

-- JobRequeueBulk is JobRequeue for a chunk of jobs (@ids, each with its
-- @expected_statuses and @expected_run_numbers, no id twice), in one
-- statement: every job requeueable as observed is locked FOR NO KEY UPDATE,
-- in id order (so chunks over overlapping jobs, and single requeues, wait
-- for each other instead of deadlocking), advanced to its next run as
-- JobRequeue does and given its REQUEUED event. It returns a row per job
-- requeued, with its new run and the number of events written, for a
-- check; the others are untouched and unlocked (JobGetForBulkRequeueClassification
-- tells them apart). Each job's expectation is found by its place in @ids
-- (array_position), not by joining an unnest of the arrays, which Citus
-- cannot plan beside the row lock.
-- Each event names @operator only when it is set (a NULL is stripped).
-- name: JobRequeueBulk :many
WITH clock AS (
    SELECT now() AS now
),
target AS MATERIALIZED (
    SELECT jq.organization_id, jq.id, jq.run_number, jq.attempt
    FROM job_queue jq
    WHERE jq.organization_id = @organization_id
      AND jq.id = ANY(@ids::uuid[])
      AND jq.run_number = (@expected_run_numbers::int[])[array_position(@ids::uuid[], jq.id)]
      AND jq.status::text = (@expected_statuses::text[])[array_position(@ids::uuid[], jq.id)]
      AND jq.status IN ('DEAD_LETTERED', 'CANCELED')
      AND NOT (jq.status = 'CANCELED' AND jq.lease_expires_at IS NOT NULL AND jq.lease_expires_at > clock_timestamp())
      AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                      WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id)
      AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
    ORDER BY jq.id
    FOR NO KEY UPDATE OF jq
),
requeued AS (
    UPDATE job_queue
    SET updated_at = now(),
        status = 'PENDING',
        stage = 'queued',
        progress_done = (CASE WHEN @reset_progress::bool THEN NULL ELSE job_queue.progress_done END)::bigint,
        progress_total = (CASE WHEN @reset_progress::bool THEN NULL ELSE job_queue.progress_total END)::bigint,
        checkpoint = (CASE WHEN @reset_progress::bool THEN NULL ELSE job_queue.checkpoint END)::jsonb,
        output = NULL,
        run_number = job_queue.run_number + 1,
        attempt = 0,
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        started_at = NULL,
        finished_at = NULL,
        next_run_at = clock.now,
        status_reason = @reason::text,
        last_error_code = NULL,
        last_error_message = NULL
    FROM target, clock
    -- Restricted by the locked rows alone, as in JobCompleteMany: with the
    -- tenant given as the parameter, a tenant the statistics did not know
    -- was read whole through the key's tenant prefix and each of its jobs
    -- paired with every locked row (TestHotPlansStayBounded).
    WHERE job_queue.organization_id = target.organization_id
      AND job_queue.id = target.id
    RETURNING job_queue.id, job_queue.run_number, job_queue.status, job_queue.job_type
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, payload)
    SELECT target.organization_id, target.id, target.run_number, NULLIF(target.attempt, 0), 'REQUEUED',
           jsonb_strip_nulls(jsonb_build_object(
               'reason', @reason::text,
               'state_policy', @state_policy::text,
               'requeue_kind', 'COMPARE_AND_REQUEUE',
               'operator', sqlc.narg(operator)::text))
    FROM target
    ORDER BY target.id
    RETURNING id
)
SELECT requeued.id,
       requeued.run_number,
       requeued.status,
       requeued.job_type,
       (SELECT count(*) FROM event) AS event_count
FROM requeued;

-- JobGetForBulkRequeueClassification reads, without any lock, the jobs of
-- a chunk that JobRequeueBulk did not requeue (@ids with the
-- @expected_statuses and @expected_run_numbers observed), in the caller's
-- tenant: a job it returns no row for is not found; the others are told
-- apart as JobRequeue's miss row does (status, run, workflow
-- membership, a live canceled lease, and the requeue of the expected run:
-- its reason and the status the run ended in). A refused job thus leaves
-- no row lock behind. (The event probes are correlated subqueries, so that
-- each reads the job's event index once whatever the planner guesses of
-- the arrays' length.)
-- name: JobGetForBulkRequeueClassification :many
WITH input AS (
    SELECT i.id, i.expected_statuses AS expected_status,
           (@expected_run_numbers::int[])[i.ord] AS expected_run_number, i.ord
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@expected_statuses::text[])) WITH ORDINALITY AS i(id, expected_statuses, ord)
),
probed AS MATERIALIZED (
    SELECT input.id, input.ord,
           (SELECT (e.payload ->> 'reason')::text
            FROM job_events e
            WHERE e.organization_id = @organization_id
              AND e.job_id = input.id
              AND e.run_number = input.expected_run_number
              AND e.event_type::text = 'REQUEUED'
            ORDER BY e.id
            LIMIT 1)::text AS reason,
           (SELECT t.event_type::text
            FROM job_events t
            WHERE t.organization_id = @organization_id
              AND t.job_id = input.id
              AND t.run_number = input.expected_run_number
              AND t.event_type::text IN ('DEAD_LETTERED', 'CANCELED')
            ORDER BY t.id DESC
            LIMIT 1)::text AS ended_as
    FROM input
),
requeue AS (
    SELECT ord, reason, ended_as FROM probed WHERE reason IS NOT NULL
)
SELECT jq.id,
       jq.status,
       jq.run_number,
       EXISTS (SELECT 1 FROM workflow_steps ws
               WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id) AS workflow_managed,
       (jq.status = 'CANCELED' AND jq.lease_expires_at IS NOT NULL
        AND jq.lease_expires_at > clock_timestamp())::bool AS lease_live,
       requeue.reason AS requeued_reason,
       requeue.ended_as AS requeued_from
FROM probed
JOIN job_queue jq ON jq.organization_id = @organization_id AND jq.id = probed.id AND jq.id = ANY(@ids::uuid[])
LEFT JOIN requeue ON requeue.ord = probed.ord
ORDER BY probed.ord;

-- JobListFinishedForRequeue selects the next page of a bulk requeue by
-- filter in one tenant: jobs in @status (DEAD_LETTERED or CANCELED), of
-- @job_type and with last error @error_code when those are set, finished
-- in [@since, @until), in finish order then id, after the cursor
-- (@after_finished_at, @after_id; NULLs for the first page), at most
-- @max_jobs. A NULL @since is open; a NULL @until is now(), the
-- transaction's start, returned as selection_until on every row so that
-- the action pins it and passes it to every later page: jobs that finish
-- while the action runs (requeued ones that fail again among them) are
-- never selected. No lock: the chunk locks what it requeues.
-- name: JobListFinishedForRequeue :many
SELECT jq.id, jq.status, jq.run_number, jq.finished_at::timestamptz AS finished_at,
       coalesce(sqlc.narg(until)::timestamptz, now())::timestamptz AS selection_until
FROM job_queue jq
WHERE jq.organization_id = @organization_id
  AND jq.status IN ('DEAD_LETTERED', 'CANCELED')
  AND jq.status = @status::job_status
  AND (sqlc.narg(job_type)::text IS NULL OR jq.job_type = sqlc.narg(job_type)::text)
  AND (sqlc.narg(error_code)::text IS NULL OR jq.last_error_code = sqlc.narg(error_code)::text)
  AND jq.finished_at >= coalesce(sqlc.narg(since)::timestamptz, '-infinity')
  AND jq.finished_at < coalesce(sqlc.narg(until)::timestamptz, now())
  AND (jq.finished_at, jq.id) > (coalesce(sqlc.narg(after_finished_at)::timestamptz, '-infinity'),
                                 coalesce(sqlc.narg(after_id)::uuid, '00000000-0000-0000-0000-000000000000'))
ORDER BY jq.finished_at, jq.id
LIMIT @max_jobs;

-- JobCountFinishedForRequeue counts what JobListFinishedForRequeue would
-- select from the start under the same bounds (a NULL @until is now(), the
-- transaction's start), at most @max_jobs. No lock.
-- name: JobCountFinishedForRequeue :one
SELECT count(*) FROM (
    SELECT 1
    FROM job_queue jq
    WHERE jq.organization_id = @organization_id
      AND jq.status IN ('DEAD_LETTERED', 'CANCELED')
      AND jq.status = @status::job_status
      AND (sqlc.narg(job_type)::text IS NULL OR jq.job_type = sqlc.narg(job_type)::text)
      AND (sqlc.narg(error_code)::text IS NULL OR jq.last_error_code = sqlc.narg(error_code)::text)
      AND jq.finished_at >= coalesce(sqlc.narg(since)::timestamptz, '-infinity')
      AND jq.finished_at < coalesce(sqlc.narg(until)::timestamptz, now())
    LIMIT @max_jobs
) selected;

-- JobEventListRequeuedForJob returns a job's REQUEUED events, oldest
-- first, at most @max_events, only when the job is in the caller's tenant:
-- its requeue history (each event's run is the run that was requeued, its
-- payload the reason and state policy). No lock. (Here and in the probes
-- above the event type is compared as text, so that the plan reads the
-- job's own events, a range of job_events' key, never the index of every
-- event of that type.)
-- name: JobEventListRequeuedForJob :many
SELECT sqlc.embed(job_events)
FROM job_events
WHERE job_events.organization_id = @organization_id
  AND job_events.job_id = @job_id
  AND job_events.event_type::text = 'REQUEUED'
ORDER BY job_events.run_number, job_events.id
LIMIT @max_events;

-- JobRequeueBulkRouted is JobRequeueBulk without its events, in the shape
-- Citus runs in one step on the tenant's shard; the library sends it on
-- Citus, and JobEventRequeuedMany after it with the rows it returned, in
-- one transaction. The same guards, checked by the update on the newest
-- row of each job it locks (the target's status compared as the enum and
-- each expected status as text, since Citus refuses a cast of a column in
-- a routed write; a canceled lease's liveness by statement_timestamp(),
-- since Citus refuses the volatile clock_timestamp() there). The jobs are
-- locked as the update meets them, by primary key in id order. Each row
-- returns the attempt the run ended with (before_attempt, read from the
-- statement's snapshot: a job that stays DEAD_LETTERED or CANCELED at the
-- expected run keeps its attempt) for the event.
-- name: JobRequeueBulkRouted :many
UPDATE job_queue jq
SET updated_at = now(),
    status = 'PENDING',
    stage = 'queued',
    progress_done = (CASE WHEN @reset_progress::bool THEN NULL ELSE jq.progress_done END)::bigint,
    progress_total = (CASE WHEN @reset_progress::bool THEN NULL ELSE jq.progress_total END)::bigint,
    checkpoint = (CASE WHEN @reset_progress::bool THEN NULL ELSE jq.checkpoint END)::jsonb,
    output = NULL,
    run_number = jq.run_number + 1,
    attempt = 0,
    lease_expires_at = NULL,
    last_heartbeat_at = NULL,
    worker_id = NULL,
    started_at = NULL,
    finished_at = NULL,
    next_run_at = clock.now,
    status_reason = @reason::text,
    last_error_code = NULL,
    last_error_message = NULL
FROM (SELECT now() AS now, statement_timestamp() AS at OFFSET 0) clock,
     (SELECT b.id, b.attempt FROM job_queue b
      WHERE b.organization_id = @organization_id AND b.id = ANY(@ids::uuid[])) before
WHERE jq.organization_id = @organization_id
  AND jq.id = ANY(@ids::uuid[])
  AND before.id = jq.id
  AND jq.run_number = (@expected_run_numbers::int[])[array_position(@ids::uuid[], jq.id)]
  AND (@expected_statuses::text[])[array_position(@ids::uuid[], jq.id)]
      = CASE WHEN jq.status = 'DEAD_LETTERED' THEN 'DEAD_LETTERED'
             WHEN jq.status = 'CANCELED' THEN 'CANCELED' END
  AND jq.status IN ('DEAD_LETTERED', 'CANCELED')
  AND NOT (jq.status = 'CANCELED' AND jq.lease_expires_at IS NOT NULL AND jq.lease_expires_at > clock.at)
  AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                  WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id)
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
RETURNING jq.id, jq.run_number, jq.status, jq.job_type, before.attempt AS before_attempt;

-- JobEventRequeuedMany writes the REQUEUED event of each job
-- JobRequeueBulkRouted requeued (@ids, in id order, with at the same
-- position the run that ended and its attempt, 0: NULL), as
-- JobRequeueBulk's own events: no table read, one step on Citus.
-- name: JobEventRequeuedMany :exec
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, payload)
SELECT @organization_id, e.id, (@run_numbers::int[])[e.ord], NULLIF((@attempts::int[])[e.ord], 0), 'REQUEUED',
       jsonb_strip_nulls(jsonb_build_object(
           'reason', @reason::text,
           'state_policy', @state_policy::text,
           'requeue_kind', 'COMPARE_AND_REQUEUE',
           'operator', sqlc.narg(operator)::text))
FROM unnest(@ids::uuid[]) WITH ORDINALITY AS e(id, ord);

-- JobRequeueRouted is JobRequeue's requeue without its event and without
-- the classification of a miss, in the shape Citus runs in one step on
-- the tenant's shard; the library sends it on Citus, then
-- JobEventRequeued when it returned the job, or, when it did not, JobGetByID
-- and JobGetForBulkRequeueClassification to classify the miss, in one
-- transaction. The guards are JobRequeue's, checked by
-- the update on the newest row it locks (a canceled lease's liveness by
-- statement_timestamp(), since Citus refuses the volatile
-- clock_timestamp() in a routed write). It returns the job after the
-- requeue and (before_*) the columns the requeue changed as the
-- statement's snapshot had them: a job that is still DEAD_LETTERED or
-- CANCELED at the expected run when the update locks it has not changed
-- since (only a requeue moves it on).
-- name: JobRequeueRouted :one
UPDATE job_queue jq
SET updated_at = now(),
    status = 'PENDING',
    stage = 'queued',
    progress_done = (CASE WHEN @reset_progress::bool THEN NULL ELSE jq.progress_done END)::bigint,
    progress_total = (CASE WHEN @reset_progress::bool THEN NULL ELSE jq.progress_total END)::bigint,
    checkpoint = (CASE WHEN @reset_progress::bool THEN NULL ELSE jq.checkpoint END)::jsonb,
    output = NULL,
    run_number = jq.run_number + 1,
    attempt = 0,
    lease_expires_at = NULL,
    last_heartbeat_at = NULL,
    worker_id = NULL,
    started_at = NULL,
    finished_at = NULL,
    next_run_at = clock.now,
    status_reason = @reason::text,
    last_error_code = NULL,
    last_error_message = NULL
FROM (SELECT now() AS now, statement_timestamp() AS at OFFSET 0) clock,
     (SELECT b.id, b.status, b.stage, b.run_number, b.attempt, b.progress_done, b.progress_total, b.progress_pct,
             b.checkpoint, b.output, b.lease_expires_at, b.last_heartbeat_at, b.worker_id, b.started_at,
             b.finished_at, b.next_run_at, b.status_reason, b.last_error_code, b.last_error_message, b.updated_at
      FROM job_queue b
      WHERE b.organization_id = @organization_id AND b.id = @id) before
WHERE jq.organization_id = @organization_id
  AND jq.id = @id
  AND before.id = jq.id
  AND jq.status IN ('DEAD_LETTERED', 'CANCELED')
  AND jq.status = @expected_status::job_status
  AND jq.run_number = @expected_run_number
  AND NOT (jq.status = 'CANCELED' AND jq.lease_expires_at IS NOT NULL AND jq.lease_expires_at > clock.at)
  AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                  WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id)
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
RETURNING jq.*,
          before.status AS before_status,
          before.stage AS before_stage,
          before.run_number AS before_run_number,
          before.attempt AS before_attempt,
          before.progress_done AS before_progress_done,
          before.progress_total AS before_progress_total,
          before.progress_pct AS before_progress_pct,
          before.checkpoint AS before_checkpoint,
          before.output AS before_output,
          before.lease_expires_at AS before_lease_expires_at,
          before.last_heartbeat_at AS before_last_heartbeat_at,
          before.worker_id AS before_worker_id,
          before.started_at AS before_started_at,
          before.finished_at AS before_finished_at,
          before.next_run_at AS before_next_run_at,
          before.status_reason AS before_status_reason,
          before.last_error_code AS before_last_error_code,
          before.last_error_message AS before_last_error_message,
          before.updated_at AS before_updated_at;

-- JobEventRequeued writes the REQUEUED event of the job JobRequeueRouted
-- requeued (the run that ended and its attempt, 0: NULL), as JobRequeue's
-- own event, and returns its id. No table read: one step on Citus.
-- name: JobEventRequeued :one
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, payload)
VALUES (@organization_id, @job_id, @run_number::int, NULLIF(@attempt::int, 0), 'REQUEUED',
        jsonb_strip_nulls(jsonb_build_object(
            'reason', @reason::text,
            'state_policy', @state_policy::text,
            'requeue_kind', 'COMPARE_AND_REQUEUE',
            'operator', sqlc.narg(operator)::text)))
RETURNING id;
