-- Bulk enqueue (jobs.EnqueueMany). The requests come as parallel arrays,
-- one position per request (@ids, and at the same position its tenant,
-- type and settings; NULL settings take the definition's defaults). The
-- library validates every request first and sends only valid ones.
-- Absent settings are sent as: false in @priority_set and @run_at_set, 0
-- max attempts or timeout (a valid one is positive), '' key or resource
-- key (a valid one is not blank), a NULL snapshot (an unkeyed request
-- without a chosen id).

-- JobEnqueueMany inserts a batch of jobs over any tenants and their
-- ENQUEUED events in one statement, on one server. It is JobEnqueue for
-- many requests: the definitions of the batch's types are read FOR SHARE
-- (only enabled ones; a request of a missing or disabled type inserts
-- nothing), a request whose key or id is taken inserts nothing (ON
-- CONFLICT DO NOTHING, after waiting for an uncommitted competitor), and
-- when @idempotent is set (some request carries a snapshot) it reads and
-- writes nothing unless the transaction is READ COMMITTED. The rows are
-- inserted in (tenant, type, key, position) order: two batches with
-- overlapping keys wait on each other's keys in the same order, never in
-- a cycle, and of two requests of one batch with the same key the earlier
-- one inserts. Returns the inserted rows; a request without a row wrote
-- nothing.
-- name: JobEnqueueMany :many
WITH clock AS (
    SELECT now() AS now
),
input AS (
    SELECT i.id,
           i.ord,
           (@organization_ids::uuid[])[i.ord] AS organization_id,
           i.job_types AS job_type,
           i.payloads AS payload,
           CASE WHEN (@priority_set::bool[])[i.ord] THEN (@priorities::int[])[i.ord] END AS priority,
           NULLIF((@max_attempts::int[])[i.ord], 0) AS max_attempts,
           NULLIF((@timeout_seconds::int[])[i.ord], 0) AS timeout_seconds,
           CASE WHEN (@run_at_set::bool[])[i.ord] THEN (@next_run_ats::timestamptz[])[i.ord] END AS next_run_at,
           NULLIF(i.idempotency_keys, '') AS idempotency_key,
           i.enqueue_requests AS enqueue_request,
           NULLIF(i.execution_resource_keys, '') AS execution_resource_key
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@job_types::text[]), unnest(@payloads::jsonb[]), unnest(@idempotency_keys::text[]), unnest(@enqueue_requests::jsonb[]), unnest(@execution_resource_keys::text[])) WITH ORDINALITY AS i(id, job_types, payloads, idempotency_keys, enqueue_requests, execution_resource_keys, ord)
),
definition AS (
    SELECT job_type, default_priority, max_attempts, default_timeout_seconds
    FROM job_definitions
    WHERE job_definitions.job_type = ANY (@job_types::text[]) AND job_definitions.is_enabled
      AND (NOT @idempotent::bool
           OR lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted'))
    FOR SHARE
),
inserted AS (
    INSERT INTO job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, stage, idempotency_key, enqueue_request, execution_resource_key
    )
    SELECT input.id,
           d.job_type,
           input.organization_id,
           input.payload,
           COALESCE(input.priority, d.default_priority),
           COALESCE(input.max_attempts, d.max_attempts),
           COALESCE(input.timeout_seconds, d.default_timeout_seconds),
           COALESCE(input.next_run_at, clock.now),
           CASE WHEN input.next_run_at > clock.now THEN 'scheduled' ELSE 'queued' END,
           input.idempotency_key,
           input.enqueue_request,
           input.execution_resource_key
    FROM input JOIN definition d ON d.job_type = input.job_type CROSS JOIN clock
    ORDER BY input.organization_id, input.job_type, input.idempotency_key, input.ord
    ON CONFLICT DO NOTHING
    RETURNING *
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
    SELECT organization_id, id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM inserted
)
SELECT * FROM inserted;

-- JobEnqueueManyDefinitionsRouted is JobEnqueueMany's definition read for
-- one tenant's requests on Citus, where JobEnqueueMany runs in steps
-- through the coordinator: the enabled definitions of @job_types, read FOR
-- SHARE (a definition change waits until the transaction ends), with their
-- defaults, in type order; nothing when @idempotent is set outside READ
-- COMMITTED. The caller resolves each request's settings against its
-- type's defaults and inserts with JobEnqueueManyRouted (a request of a
-- missing or disabled type inserts nothing). The probe of the tenant's
-- own job_queue for @probe_id (a fresh id) anchors the statement on the
-- tenant's shard, as in JobEnqueueDefinitionRouted: one step there.
-- name: JobEnqueueManyDefinitionsRouted :many
SELECT d.job_type, d.default_priority, d.max_attempts, d.default_timeout_seconds
FROM job_definitions d
WHERE d.job_type = ANY (@job_types::text[]) AND d.is_enabled
  AND NOT EXISTS (SELECT 1 FROM job_queue taken
                  WHERE taken.organization_id = @organization_id::uuid AND taken.id = @probe_id::uuid)
  AND (NOT @idempotent::bool
       OR lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted'))
ORDER BY d.job_type
FOR SHARE OF d;

-- JobEnqueueManyRouted inserts one tenant's (@organization_id) requests of
-- a bulk enqueue on Citus, those JobEnqueueManyDefinitionsRouted allowed,
-- each with its settings resolved against its definition by the caller
-- (@priorities, @max_attempts and @timeout_seconds set for every
-- request), as JobEnqueueMany does without its events: a run time not
-- set means now() (stage queued; a future time: scheduled), a request
-- whose key or id is taken inserts nothing (ON CONFLICT DO NOTHING, after
-- waiting for an uncommitted competitor), and the rows are inserted in
-- (type, key, position) order. Returns the inserted rows; the library
-- writes their events with JobEventEnqueuedMany, in one transaction. It
-- reads no table: Citus evaluates it on the coordinator and sends the
-- rows to the tenant's shard in one step.
-- name: JobEnqueueManyRouted :many
INSERT INTO job_queue (
    id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
    next_run_at, stage, idempotency_key, enqueue_request, execution_resource_key
)
SELECT i.id,
       i.job_types,
       @organization_id::uuid,
       i.payloads,
       (@priorities::int[])[i.ord],
       (@max_attempts::int[])[i.ord],
       (@timeout_seconds::int[])[i.ord],
       CASE WHEN (@run_at_set::bool[])[i.ord] THEN (@next_run_ats::timestamptz[])[i.ord] ELSE now() END,
       CASE WHEN (@run_at_set::bool[])[i.ord] AND (@next_run_ats::timestamptz[])[i.ord] > now()
            THEN 'scheduled' ELSE 'queued' END,
       NULLIF(i.idempotency_keys, ''),
       i.enqueue_requests,
       NULLIF(i.execution_resource_keys, '')
FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@job_types::text[]), unnest(@payloads::jsonb[]), unnest(@idempotency_keys::text[]), unnest(@enqueue_requests::jsonb[]), unnest(@execution_resource_keys::text[])) WITH ORDINALITY AS i(id, job_types, payloads, idempotency_keys, enqueue_requests, execution_resource_keys, ord)
ORDER BY i.job_types, NULLIF(i.idempotency_keys, ''), i.ord
ON CONFLICT DO NOTHING
RETURNING *;

-- JobEventEnqueuedMany writes the ENQUEUED event of each job
-- JobEnqueueManyRouted (or JobEnqueueValuesRouted) inserted (@ids with, at the same position, the
-- stage and type of the row it returned), as JobEnqueueMany's own event.
-- It reads no table, so Citus sends the rows to the tenant's shard in one
-- step.
-- name: JobEventEnqueuedMany :exec
INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
SELECT @organization_id, e.id, 1, 'ENQUEUED', e.stages,
       jsonb_build_object('job_type', e.job_types)
FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@stages::text[]), unnest(@job_types::text[])) WITH ORDINALITY AS e(id, stages, job_types, ord);

-- JobLockManyByIdempotencyKeyGlobal finds the global scope's jobs holding
-- the given (type, key) pairs and locks them FOR NO KEY UPDATE, in id
-- order, as JobLockByIdempotencyKeyGlobal does for one key; same_request
-- tells whether a job's stored snapshot equals the request's at position
-- ord (1-based) of the arrays. Only under READ COMMITTED; otherwise it
-- reads and locks nothing.
-- name: JobLockManyByIdempotencyKeyGlobal :many
WITH input AS (
    SELECT i.job_type, i.ord, i.idempotency_keys AS idempotency_key,
           i.enqueue_requests AS enqueue_request
    FROM ROWS FROM (unnest(@job_types::text[]), unnest(@idempotency_keys::text[]), unnest(@enqueue_requests::jsonb[])) WITH ORDINALITY AS i(job_type, idempotency_keys, enqueue_requests, ord)
)
SELECT input.ord::int AS ord, sqlc.embed(job_queue),
       (job_queue.enqueue_request = input.enqueue_request)::bool AS same_request
FROM job_queue
JOIN input ON job_queue.job_type = input.job_type AND job_queue.idempotency_key = input.idempotency_key
WHERE job_queue.organization_id = '00000000-0000-0000-0000-000000000000'
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
ORDER BY job_queue.id
FOR NO KEY UPDATE OF job_queue;

-- JobLockManyByIdempotencyKeyOrg is JobLockManyByIdempotencyKeyGlobal
-- for one organization; "not the nil UUID" is spelled out so that any
-- plan can use uq_job_queue_type_idempotency_org.
-- name: JobLockManyByIdempotencyKeyOrg :many
WITH input AS (
    SELECT i.job_type, i.ord, i.idempotency_keys AS idempotency_key,
           i.enqueue_requests AS enqueue_request
    FROM ROWS FROM (unnest(@job_types::text[]), unnest(@idempotency_keys::text[]), unnest(@enqueue_requests::jsonb[])) WITH ORDINALITY AS i(job_type, idempotency_keys, enqueue_requests, ord)
)
SELECT input.ord::int AS ord, sqlc.embed(job_queue),
       (job_queue.enqueue_request = input.enqueue_request)::bool AS same_request
FROM job_queue
JOIN input ON job_queue.job_type = input.job_type AND job_queue.idempotency_key = input.idempotency_key
WHERE job_queue.organization_id = @organization_id
  AND job_queue.organization_id <> '00000000-0000-0000-0000-000000000000'
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
ORDER BY job_queue.id
FOR NO KEY UPDATE OF job_queue;

-- JobLockManyForEnqueueByID finds the tenant's jobs holding the given
-- caller-chosen ids and locks them FOR NO KEY UPDATE in id order, with
-- same_request as in JobLockForEnqueueByID. Only under READ COMMITTED.
-- name: JobLockManyForEnqueueByID :many
WITH input AS (
    SELECT i.id, i.ord, i.enqueue_requests AS enqueue_request
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@enqueue_requests::jsonb[])) WITH ORDINALITY AS i(id, enqueue_requests, ord)
)
SELECT input.ord::int AS ord, sqlc.embed(job_queue),
       (job_queue.enqueue_request IS NOT DISTINCT FROM input.enqueue_request)::bool AS same_request
FROM job_queue
JOIN input ON job_queue.id = input.id
WHERE job_queue.organization_id = @organization_id
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
ORDER BY job_queue.id
FOR NO KEY UPDATE OF job_queue;
