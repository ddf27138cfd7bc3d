-- Every statement that addresses a job names its tenant: organization_id
-- is NOT NULL, the global scope stored as the nil UUID (the library maps
-- it at the edge), and @organization_id is always given. Every table such
-- a statement reads, in a join or a correlated subquery too, is pinned to
-- @organization_id itself (not to another table's column): only then does
-- Citus see that the whole statement belongs to one shard and route it
-- there as it is. The statements over every tenant (the cross-tenant claim
-- and recovery, the operator listings) say so.

-- JobEnqueue inserts a job and its ENQUEUED event in one statement. The
-- job type's definition must be enabled; it is read FOR SHARE, so a
-- definition change waits. NULL settings take the definition's defaults; a
-- NULL next_run_at means now() (stage queued; a future time: scheduled).
-- A keyed job (idempotency_key and enqueue_request set) whose type, tenant
-- and key are taken, or a job whose id is taken (a caller-chosen id, with
-- enqueue_request set), inserts nothing (ON CONFLICT DO NOTHING, after
-- waiting for an uncommitted competitor); an idempotent insert (one with
-- enqueue_request) runs only under READ COMMITTED, else it reads and
-- writes nothing and the caller refuses. No row, and nothing written,
-- when the definition is missing or disabled or the key or id is taken.
-- The workers' wake-up is a statement of its own (WorkerNotifyDue).
-- The probe of the tenant's own job_queue for @id (a fresh id nobody
-- holds, or the chosen id, which ON CONFLICT would find as well) is there
-- for Citus: it puts the tenant's shard among the rows the statement
-- reads, so Citus anchors the statement there. Anchored on the reference
-- table instead, Citus takes a shard-wide share lock for the FOR SHARE
-- and then a row-exclusive one for the insert, and two concurrent
-- enqueues deadlock between the two.
-- name: JobEnqueue :one
WITH clock AS (
    SELECT now() AS now
),
definition AS (
    SELECT job_type, default_priority, max_attempts, default_timeout_seconds
    FROM job_definitions
    WHERE job_definitions.job_type = @job_type AND job_definitions.is_enabled
      AND NOT EXISTS (SELECT 1 FROM job_queue taken
                      WHERE taken.organization_id = @organization_id::uuid AND taken.id = @id)
      AND (sqlc.narg(enqueue_request)::jsonb IS NULL
           OR lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted'))
    FOR SHARE
),
inserted AS (
    INSERT INTO job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, stage, idempotency_key, enqueue_request, execution_resource_key
    )
    SELECT @id,
           d.job_type,
           @organization_id::uuid,
           @payload::jsonb,
           COALESCE(sqlc.narg(priority)::int, d.default_priority),
           COALESCE(sqlc.narg(max_attempts)::int, d.max_attempts),
           COALESCE(sqlc.narg(timeout_seconds)::int, d.default_timeout_seconds),
           COALESCE(sqlc.narg(next_run_at)::timestamptz, clock.now),
           CASE WHEN sqlc.narg(next_run_at)::timestamptz > clock.now THEN 'scheduled' ELSE 'queued' END,
           sqlc.narg(idempotency_key)::text,
           sqlc.narg(enqueue_request)::jsonb,
           sqlc.narg(execution_resource_key)::text
    FROM definition d CROSS JOIN clock
    ON CONFLICT DO NOTHING
    RETURNING *
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, event_type, stage, payload)
    SELECT organization_id, id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM inserted
)
SELECT * FROM inserted;

-- JobEnqueueDefinitionRouted is JobEnqueue's first part on Citus, where
-- JobEnqueue runs in steps through the coordinator: the definition of
-- @job_type, when enabled, read FOR SHARE (a definition change waits until
-- the transaction ends), with its defaults for the insert that follows
-- (JobEnqueueValuesRouted). No row when the definition is missing or
-- disabled, when the tenant holds @id, or, for an idempotent insert (one
-- with @enqueue_request), outside READ COMMITTED. The probe of the
-- tenant's own job_queue for @id anchors the statement on the tenant's
-- shard, where Citus runs it in one step.
-- name: JobEnqueueDefinitionRouted :one
SELECT d.default_priority, d.max_attempts, d.default_timeout_seconds
FROM job_definitions d
WHERE d.job_type = @job_type AND d.is_enabled
  AND NOT EXISTS (SELECT 1 FROM job_queue taken
                  WHERE taken.organization_id = @organization_id::uuid AND taken.id = @id)
  AND (sqlc.narg(enqueue_request)::jsonb IS NULL
       OR lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted'))
FOR SHARE OF d;

-- JobEnqueueValuesRouted inserts the job JobEnqueueDefinitionRouted
-- allowed, with the settings resolved against the definition's defaults
-- by the caller, as JobEnqueue does: a NULL next_run_at means now()
-- (stage queued; a future time: scheduled), and a taken key or id inserts
-- nothing (ON CONFLICT DO NOTHING, after waiting for an uncommitted
-- competitor). Without its event, which JobEventEnqueuedMany writes from
-- the row it returned. A plain INSERT ... VALUES: Citus evaluates now() on
-- the coordinator and runs it in one step on the tenant's shard.
-- name: JobEnqueueValuesRouted :one
INSERT INTO job_queue (id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
                       next_run_at, stage, idempotency_key, enqueue_request, execution_resource_key)
VALUES (@id, @job_type, @organization_id::uuid, @payload::jsonb, @priority::int, @max_attempts::int,
        @timeout_seconds::int,
        COALESCE(sqlc.narg(next_run_at)::timestamptz, now()),
        CASE WHEN sqlc.narg(next_run_at)::timestamptz > now() THEN 'scheduled' ELSE 'queued' END,
        sqlc.narg(idempotency_key)::text, sqlc.narg(enqueue_request)::jsonb, sqlc.narg(execution_resource_key)::text)
ON CONFLICT DO NOTHING
RETURNING *;

-- JobLockByIdempotencyKeyGlobal finds the global scope's job holding a
-- key and locks it FOR NO KEY UPDATE (the status reported to the caller
-- stays true until the transaction ends; NO KEY UPDATE so later
-- foreign-key checks on the row cannot deadlock against it). same_request
-- tells whether the stored request snapshot equals the given one (jsonb
-- equality, so key order and spacing do not matter). It follows
-- JobEnqueue in the same pipeline and runs only when that insert did not
-- write job @inserted_id (a fresh id nobody else holds, so its existence
-- tells), and only under READ COMMITTED; otherwise it reads and locks
-- nothing. The tenant is the literal nil UUID, so that any plan uses
-- uq_job_queue_type_idempotency_global.
-- name: JobLockByIdempotencyKeyGlobal :one
SELECT sqlc.embed(job_queue),
       (enqueue_request = @enqueue_request::jsonb)::bool AS same_request
FROM job_queue
WHERE job_queue.organization_id = '00000000-0000-0000-0000-000000000000'
  AND job_queue.job_type = @job_type
  AND job_queue.idempotency_key = @idempotency_key
  AND NOT EXISTS (SELECT 1 FROM job_queue inserted
                  WHERE inserted.organization_id = '00000000-0000-0000-0000-000000000000'
                    AND inserted.id = @inserted_id)
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
FOR NO KEY UPDATE;

-- JobLockByIdempotencyKeyOrg is JobLockByIdempotencyKeyGlobal for one
-- organization, with the same guards; "not the nil UUID" is spelled out
-- so that any plan uses uq_job_queue_type_idempotency_org.
-- name: JobLockByIdempotencyKeyOrg :one
SELECT sqlc.embed(job_queue),
       (enqueue_request = @enqueue_request::jsonb)::bool AS same_request
FROM job_queue
WHERE job_queue.organization_id = @organization_id
  AND job_queue.organization_id <> '00000000-0000-0000-0000-000000000000'
  AND job_queue.job_type = @job_type
  AND job_queue.idempotency_key = @idempotency_key
  AND NOT EXISTS (SELECT 1 FROM job_queue inserted
                  WHERE inserted.organization_id = @organization_id AND inserted.id = @inserted_id)
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
FOR NO KEY UPDATE;

-- JobLockForEnqueueByID finds the tenant's job holding a caller-chosen id
-- and locks it FOR NO KEY UPDATE, as JobLockByIdempotencyKey does for a
-- key, with same_request telling whether its stored request snapshot
-- equals the given one. It follows JobEnqueue in the same pipeline; when
-- that insert wrote the job, it finds the new row, which the caller
-- ignores. Only under READ COMMITTED; otherwise it reads and locks
-- nothing.
-- name: JobLockForEnqueueByID :one
SELECT sqlc.embed(job_queue),
       (enqueue_request IS NOT DISTINCT FROM @enqueue_request::jsonb)::bool AS same_request
FROM job_queue
WHERE job_queue.organization_id = @organization_id
  AND job_queue.id = @id
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
FOR NO KEY UPDATE;

-- JobGetByID reads one job of the caller's tenant. No lock.
-- name: JobGetByID :one
SELECT * FROM job_queue
WHERE organization_id = @organization_id
  AND id = @id;

-- JobGetTenant returns the tenant of the job with an id, whatever it is,
-- for the paths that know only a job's id (an unscoped worker call finds
-- the tenant first, then names it). No row when no job has the id. On
-- Citus it asks every shard. No lock.
-- name: JobGetTenant :one
SELECT organization_id FROM job_queue WHERE id = @id LIMIT 1;

-- JobGetTenants is JobGetTenant for many ids: one row per job found.
-- name: JobGetTenants :many
SELECT id, organization_id FROM job_queue WHERE id = ANY(@ids::uuid[]);

-- JobClaim leases up to @max_jobs due PENDING jobs of the given types (all
-- types when the array is empty), of every tenant, to a worker, in one
-- statement, in claim order: priority high to low, then due time, then
-- age. The claim index is led by the type (idx_job_queue_claim: job type,
-- priority, due time, age), so a claim reads only its own types' jobs,
-- however many jobs of other types come first in the claim order. The
-- statement walks the distinct priorities of the claimed types' PENDING
-- jobs from the highest (one index descent per type each) and, within
-- each, takes the due jobs (a range of the index per type, so jobs
-- scheduled for later are never read) in two steps: it first reads, with
-- no lock, up to @max_jobs due jobs of each type and keeps the first
-- @max_jobs of them in claim order, which tells how many each type gets;
-- it then locks that many of each type FOR UPDATE SKIP LOCKED, so that a
-- row another transaction holds (a concurrent claimer, a replay holding an
-- existing replay) is passed by and the type's next job taken instead,
-- and never more rows are locked than the batch takes.
-- The claimed types are the defined ones, less the paused
-- (job_definitions.is_paused), whose jobs stay PENDING until the type is
-- resumed; a type given but not defined has no jobs.
-- A candidate with an execution resource key is a candidate only
-- while no live claim of its tenant holds its key, and is leased only if it
-- takes the key's claim (one per key and tenant, the first in claim order;
-- ON CONFLICT waits for an uncommitted competitor for the key, and takes
-- over a claim whose delayed release is due). Each leased job is LEASED,
-- stage running, at attempt + 1, with lease_expires_at = now() +
-- @lease_seconds, and gets one LEASED event. Returns the leased jobs in
-- claim order. Over every tenant, so not on Citus, where row locks need a
-- statement routed to one tenant: there the claim is JobListTenantsWithDueJobs
-- then JobClaimTenant tenant by tenant.
-- name: JobClaim :many
WITH RECURSIVE claim_types (job_type) AS MATERIALIZED (
    -- An array, unnested: the planner takes it for a few rows, where it
    -- takes job_definitions, too small for autovacuum to ever analyze,
    -- for hundreds (and a plan costed so high is compiled, JIT, at every
    -- claim).
    SELECT unnest(ARRAY(
        SELECT d.job_type
        FROM job_definitions d
        WHERE NOT d.is_paused
          AND (cardinality(@job_types::text[]) = 0 OR d.job_type = ANY(@job_types::text[]))))
),
priorities (priority) AS (
    SELECT max(top.priority)
    FROM claim_types t
    CROSS JOIN LATERAL (
        SELECT jq.priority FROM job_queue jq
        WHERE jq.status = 'PENDING' AND jq.job_type = t.job_type
        ORDER BY jq.priority DESC
        LIMIT 1
    ) top
    UNION ALL
    SELECT (SELECT max(lower_priority.priority)
            FROM claim_types t
            CROSS JOIN LATERAL (
                SELECT jq.priority FROM job_queue jq
                WHERE jq.status = 'PENDING' AND jq.job_type = t.job_type AND jq.priority < priorities.priority
                ORDER BY jq.priority DESC
                LIMIT 1
            ) lower_priority)
    FROM priorities
    WHERE priorities.priority IS NOT NULL
),
candidates AS MATERIALIZED (
    SELECT due.organization_id, due.id, due.execution_resource_key, due.priority, due.next_run_at, due.created_at
    FROM priorities
    -- How many of this priority's due jobs each type gets: its share of
    -- the first @max_jobs in claim order, read without a lock.
    CROSS JOIN LATERAL (
        SELECT first_due.job_type, count(*) AS jobs
        FROM (
            SELECT peek.job_type
            FROM claim_types t
            CROSS JOIN LATERAL (
                SELECT jq.job_type, jq.next_run_at, jq.created_at
                FROM job_queue jq
                WHERE jq.status = 'PENDING'
                  AND jq.job_type = t.job_type
                  AND jq.priority = priorities.priority
                  AND jq.next_run_at <= now()
                  AND (
                      jq.execution_resource_key IS NULL
                      OR NOT EXISTS (
                          SELECT 1
                          FROM job_execution_resource_claims c
                          WHERE c.organization_id = jq.organization_id
                            AND c.resource_key = jq.execution_resource_key
                            AND (c.release_after IS NULL OR c.release_after > now())
                      )
                  )
                ORDER BY jq.next_run_at, jq.created_at
                LIMIT @max_jobs
            ) peek
            ORDER BY peek.next_run_at, peek.created_at
            LIMIT @max_jobs
        ) first_due
        GROUP BY first_due.job_type
    ) share
    -- That many of the type's due jobs, locked.
    CROSS JOIN LATERAL (
        SELECT jq.organization_id, jq.id, jq.execution_resource_key, jq.priority, jq.next_run_at, jq.created_at
        FROM job_queue jq
        WHERE jq.status = 'PENDING'
          AND jq.job_type = share.job_type
          AND jq.priority = priorities.priority
          AND jq.next_run_at <= now()
          AND (
              jq.execution_resource_key IS NULL
              OR NOT EXISTS (
                  SELECT 1
                  FROM job_execution_resource_claims c
                  WHERE c.organization_id = jq.organization_id
                    AND c.resource_key = jq.execution_resource_key
                    AND (c.release_after IS NULL OR c.release_after > now())
              )
          )
        ORDER BY jq.next_run_at, jq.created_at
        LIMIT share.jobs
        FOR UPDATE OF jq SKIP LOCKED
    ) due
    LIMIT @max_jobs
),
acquired AS (
    INSERT INTO job_execution_resource_claims AS rc (
        organization_id, resource_key, job_id, run_number, attempt, worker_id, lease_expires_at
    )
    SELECT DISTINCT ON (candidates.organization_id, candidates.execution_resource_key)
           candidates.organization_id, candidates.execution_resource_key, jq.id, jq.run_number, jq.attempt + 1,
           @worker_id::text, now() + make_interval(secs => @lease_seconds::float8)
    FROM candidates
    JOIN job_queue jq ON jq.organization_id = candidates.organization_id AND jq.id = candidates.id
    WHERE candidates.execution_resource_key IS NOT NULL
    ORDER BY candidates.organization_id, candidates.execution_resource_key,
             candidates.priority DESC, candidates.next_run_at, candidates.created_at
    ON CONFLICT (organization_id, resource_key) DO UPDATE
    SET job_id = EXCLUDED.job_id,
        run_number = EXCLUDED.run_number,
        attempt = EXCLUDED.attempt,
        worker_id = EXCLUDED.worker_id,
        lease_expires_at = EXCLUDED.lease_expires_at,
        release_after = NULL,
        acquired_at = EXCLUDED.acquired_at
    WHERE rc.release_after IS NOT NULL
      AND rc.release_after <= EXCLUDED.acquired_at
    RETURNING rc.job_id
),
leased AS (
    UPDATE job_queue
    SET updated_at = now(),
        status = 'LEASED',
        attempt = attempt + 1,
        worker_id = @worker_id::text,
        lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
        last_heartbeat_at = NULL,
        started_at = now(),
        finished_at = NULL,
        stage = 'running'
    -- An array built before the update starts (an InitPlan), so that every
    -- resource claim is in place when the lease trigger checks for it.
    WHERE job_queue.id = ANY(ARRAY(
              SELECT id FROM candidates WHERE execution_resource_key IS NULL
              UNION ALL
              SELECT job_id FROM acquired))
    -- No status here: every id is a candidate this statement locked while
    -- PENDING, so none has changed since. A condition on status would let
    -- the planner find these rows through the claim index, reading every
    -- PENDING job of the queue, when its statistics do not know the queue
    -- (TestHotPlansStayBounded, and the worker bench after a bulk insert).
    RETURNING *
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload)
    SELECT organization_id, id, run_number, attempt, 'LEASED', stage,
           jsonb_build_object('worker_id', worker_id, 'lease_expires_at', lease_expires_at)
    FROM leased
)
SELECT * FROM leased
ORDER BY priority DESC, next_run_at, created_at;

-- JobListTenantsWithDueJobs lists up to @max_tenants tenants that have
-- due PENDING jobs of the given types (all types when the array is empty)
-- that are not paused, the tenant of the most urgent due job first
-- (priority, then due time).
-- It reads without a lock (on Citus: one query on every shard), so a tenant
-- listed may have no due job left by the time it is claimed from.
-- name: JobListTenantsWithDueJobs :many
SELECT jq.organization_id
FROM job_queue jq
WHERE jq.status = 'PENDING'
  AND jq.next_run_at <= now()
  AND (cardinality(@job_types::text[]) = 0 OR jq.job_type = ANY(@job_types::text[]))
  AND jq.job_type <> ALL (ARRAY(SELECT d.job_type FROM job_definitions d WHERE d.is_paused))
GROUP BY jq.organization_id
ORDER BY max(jq.priority) DESC, min(jq.next_run_at)
LIMIT @max_tenants;

-- JobClaimTenant is JobClaim for one tenant's jobs (@organization_id),
-- of the claimed types as there (the paused left out),
-- routed to the tenant's shard on Citus, where the claim runs it tenant by
-- tenant. Without JobClaim's walk over the priorities (Citus refuses a
-- recursive CTE beside the statement's writes): it reads each claimed
-- type's PENDING jobs of the tenant in claim order on
-- idx_job_queue_tenant_claim (tenant, type, priority, due time, age;
-- created on Citus only) and passes over those not yet due, so a type's
-- jobs scheduled for later at a higher priority than its due ones are
-- read; the jobs of the types it does not claim are never read. As in
-- JobClaim, each type's share of the first @max_jobs due jobs in claim
-- order is read first without a lock, then that many of each type are
-- locked SKIP LOCKED. It writes only what Citus runs in one step on the
-- tenant's shard (a SELECT
-- and an UPDATE; an INSERT in a CTE, or an INSERT into job_events, whose
-- id Citus draws on the coordinator, would be planned as steps of their
-- own whose rows travel through the coordinator to every worker): it
-- leases the candidates without an execution resource key and returns
-- them LEASED, and returns the candidates with a key as they are (still
-- PENDING, locked until the transaction ends), in claim order. The caller
-- then takes their resource claims with JobClaimTenantTakeClaims, leases
-- those that took one with JobClaimTenantKeyed, and writes the LEASED
-- events with JobEventLeasedMany, in the same transaction.
-- name: JobClaimTenant :many
WITH claim_types (job_type) AS MATERIALIZED (
    -- An array, unnested, as in JobClaim.
    SELECT unnest(ARRAY(
        SELECT d.job_type
        FROM job_definitions d
        WHERE NOT d.is_paused
          AND (cardinality(@job_types::text[]) = 0 OR d.job_type = ANY(@job_types::text[]))))
),
share AS MATERIALIZED (
    SELECT first_due.job_type, count(*) AS jobs
    FROM (
        SELECT peek.job_type
        FROM claim_types t
        CROSS JOIN LATERAL (
            SELECT jq.job_type, jq.priority, jq.next_run_at, jq.created_at
            FROM job_queue jq
            WHERE jq.status = 'PENDING'
              AND jq.organization_id = @organization_id
              AND jq.job_type = t.job_type
              AND jq.next_run_at <= now()
              AND (
                  jq.execution_resource_key IS NULL
                  OR NOT EXISTS (
                      SELECT 1
                      FROM job_execution_resource_claims c
                      WHERE c.organization_id = @organization_id
                        AND c.resource_key = jq.execution_resource_key
                        AND (c.release_after IS NULL OR c.release_after > now())
                  )
              )
            ORDER BY jq.priority DESC, jq.next_run_at, jq.created_at
            LIMIT @max_jobs
        ) peek
        ORDER BY peek.priority DESC, peek.next_run_at, peek.created_at
        LIMIT @max_jobs
    ) first_due
    GROUP BY first_due.job_type
),
candidates AS MATERIALIZED (
    SELECT due.organization_id, due.id, due.execution_resource_key
    FROM share
    CROSS JOIN LATERAL (
        SELECT jq.organization_id, jq.id, jq.execution_resource_key
        FROM job_queue jq
        WHERE jq.status = 'PENDING'
          AND jq.organization_id = @organization_id
          AND jq.job_type = share.job_type
          AND jq.next_run_at <= now()
          AND (
              jq.execution_resource_key IS NULL
              OR NOT EXISTS (
                  SELECT 1
                  FROM job_execution_resource_claims c
                  WHERE c.organization_id = @organization_id
                    AND c.resource_key = jq.execution_resource_key
                    AND (c.release_after IS NULL OR c.release_after > now())
              )
          )
        ORDER BY jq.priority DESC, jq.next_run_at, jq.created_at
        LIMIT share.jobs
        FOR UPDATE OF jq SKIP LOCKED
    ) due
),
leased AS (
    UPDATE job_queue
    SET updated_at = now(),
        status = 'LEASED',
        attempt = attempt + 1,
        worker_id = @worker_id::text,
        lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
        last_heartbeat_at = NULL,
        started_at = now(),
        finished_at = NULL,
        stage = 'running'
    WHERE job_queue.id = ANY(ARRAY(SELECT id FROM candidates WHERE execution_resource_key IS NULL))
      AND job_queue.organization_id = @organization_id
    -- No status here, as in JobClaim: the candidates are locked, PENDING.
    RETURNING *
)
SELECT * FROM leased
UNION ALL
SELECT jq.*
FROM candidates c
JOIN job_queue jq ON jq.organization_id = @organization_id AND jq.id = c.id
WHERE c.execution_resource_key IS NOT NULL
ORDER BY priority DESC, next_run_at, created_at;

-- JobClaimTenantTakeClaims takes, for a tenant's claim on Citus, the
-- execution resource claims of the keyed candidates JobClaimTenant returned
-- PENDING (locked by it in the same transaction): @ids holds one candidate
-- per resource key, the key's most urgent (the caller picks the first of
-- each key in JobClaimTenant's claim order), and a candidate takes its key's
-- claim if the key is free or its claim released and past release_after,
-- as in JobClaim. The claim is written for the lease JobClaimTenantKeyed
-- then gives: the candidate's run, its next attempt, @worker_id, and the
-- lease's expiry. It returns how many claims it took. An INSERT ... SELECT
-- from the tenant's own job_queue rows, with no CTE: Citus pushes it down
-- to the tenant's shard in one step.
-- name: JobClaimTenantTakeClaims :execrows
INSERT INTO job_execution_resource_claims AS rc (
    organization_id, resource_key, job_id, run_number, attempt, worker_id, lease_expires_at
)
SELECT jq.organization_id, jq.execution_resource_key, jq.id, jq.run_number, jq.attempt + 1,
       @worker_id::text, now() + make_interval(secs => @lease_seconds::float8)
FROM job_queue jq
WHERE jq.organization_id = @organization_id
  AND jq.id = ANY(@ids::uuid[])
  AND jq.status = 'PENDING'
  AND jq.execution_resource_key IS NOT NULL
ON CONFLICT (organization_id, resource_key) DO UPDATE
SET job_id = EXCLUDED.job_id,
    run_number = EXCLUDED.run_number,
    attempt = EXCLUDED.attempt,
    worker_id = EXCLUDED.worker_id,
    lease_expires_at = EXCLUDED.lease_expires_at,
    release_after = NULL,
    acquired_at = EXCLUDED.acquired_at
WHERE rc.release_after IS NOT NULL
  AND rc.release_after <= EXCLUDED.acquired_at;

-- JobClaimTenantKeyed leases the keyed candidates of a tenant's claim on
-- Citus (@ids, locked by JobClaimTenant in the same transaction) that hold
-- the claim for the lease: the resource claim of their key names the job,
-- its run, its next attempt and @worker_id, unreleased, as
-- JobClaimTenantTakeClaims wrote it just before (the lease trigger checks
-- the same). A candidate whose key another job holds stays PENDING. It
-- returns the leased jobs in claim order; their LEASED events are written
-- by JobEventLeasedMany. An UPDATE over the tenant's rows only: one step
-- on Citus, sent in the round trip of JobClaimTenantTakeClaims.
-- name: JobClaimTenantKeyed :many
WITH leased AS (
    UPDATE job_queue
    SET updated_at = now(),
        status = 'LEASED',
        attempt = attempt + 1,
        worker_id = @worker_id::text,
        lease_expires_at = now() + make_interval(secs => @lease_seconds::float8),
        last_heartbeat_at = NULL,
        started_at = now(),
        finished_at = NULL,
        stage = 'running'
    WHERE job_queue.organization_id = @organization_id
      AND job_queue.id = ANY(@ids::uuid[])
      -- No status here, as in JobClaim: the candidates are locked, PENDING,
      -- by JobClaimTenant in this transaction.
      AND EXISTS (SELECT 1 FROM job_execution_resource_claims c
                  WHERE c.organization_id = @organization_id
                    AND c.resource_key = job_queue.execution_resource_key
                    AND c.job_id = job_queue.id
                    AND c.run_number = job_queue.run_number
                    AND c.attempt = job_queue.attempt + 1
                    AND c.worker_id = @worker_id::text
                    AND c.release_after IS NULL)
    RETURNING *
)
SELECT * FROM leased
ORDER BY priority DESC, next_run_at, created_at;

-- JobEventLeasedMany writes the LEASED event of each job a tenant's claim
-- leased (@ids with, at the same position, the run, attempt, stage and
-- lease expiry the lease returned), naming the worker: the events JobClaim writes in its own statement, here
-- from the rows JobClaimTenant and JobClaimTenantKeyed returned, in their
-- transaction. It reads no table, so on Citus the coordinator draws the
-- event ids and sends the rows to the tenant's shard in one step.
-- name: JobEventLeasedMany :exec
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload)
SELECT @organization_id, e.id, (@run_numbers::int[])[e.ord], (@attempts::int[])[e.ord], 'LEASED',
       e.stages,
       jsonb_build_object('worker_id', @worker_id::text,
                          'lease_expires_at', (@lease_expires_ats::timestamptz[])[e.ord])
FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@stages::text[])) WITH ORDINALITY AS e(id, stages, ord);

-- The worker's writes. Each takes one tenant (@organization_id) and a
-- batch of its leases as parallel arrays (@ids with, at the same position,
-- the run, attempt and worker id, and what the write records), and changes
-- a job only while its lease is held: LEASED at that run and attempt to
-- that worker, and the lease not yet expired by the database clock
-- (clock_timestamp(), so two workers never both finish one attempt, even
-- before recovery takes an expired lease back). A job whose lease does not
-- match is left as it is and returns no row; nothing is written for it.
-- An id given twice is updated once (callers refuse duplicates). A batch
-- over several tenants is one statement per tenant, each routed to its
-- tenant's shard on Citus.
--
-- Lock order: JobCompleteMany, JobFailMany, JobHeartbeatMany and
-- JobReleaseMany first lock the leases they may change in id order (their locked CTE: the
-- entries sorted by id, each job looked up by its key and locked in a
-- lateral subquery, one entry after the other) and only then write
-- exactly the rows they locked, and the library sends a batch's tenants in tenant
-- order, all in one transaction. So those writes take their row locks in
-- (organization_id, id) order, and two of them (a heartbeat round beside
-- a completion batch of the same worker) can wait for each other but
-- never in a cycle. The Routed forms Citus runs keep the plain join: on
-- Citus a second CTE over the input is planned in steps (its now() then
-- taken on the worker node, its intermediate results refused in a
-- routed write), so there the order rests on
-- the worker sending every batch sorted by (tenant, id), which the join
-- on the sorted input array follows. The claim and the lease recovery
-- lock with SKIP LOCKED and never wait for a job's row.

-- JobCompleteMany marks leased jobs SUCCEEDED: the output (a NULL element
-- stores NULL), the final progress where given (-1: keep the stored
-- value), finished_at, the lease cleared, and one SUCCEEDED event each.
-- Leaving LEASED releases a job's execution resource claim (trigger).
-- name: JobCompleteMany :many
WITH input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id,
           i.outputs AS output,
           NULLIF((@progress_done::bigint[])[i.ord], -1) AS progress_done,
           NULLIF((@progress_total::bigint[])[i.ord], -1) AS progress_total
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[]), unnest(@outputs::jsonb[])) WITH ORDINALITY AS i(id, worker_ids, outputs, ord)
),
clock AS (
    SELECT now() AS now, clock_timestamp() AS at
),
-- Each entry's job is found by its key, from the entry (a lateral
-- subquery runs once per entry, in the sorted entries' order), whatever
-- the planner estimates: a join of the jobs with the entries, estimated
-- at one job (the status as text, a tenant the statistics do not know),
-- paired every job with every entry, a batch squared
-- (TestHotPlansStayBounded). The update then changes the rows locked
-- here and only those (they are locked, so none changed since), joined
-- by tenant and id and restricted by nothing else: the planner has no
-- cheap way to the jobs but the locked rows, so it cannot read the jobs
-- first (through an index of the tenant, estimated at one row under
-- statistics that predate the queue) and pair each with every locked
-- row. The tenant is the locked rows' column, so on Citus this
-- one-server form would span the shards; the library sends Citus the
-- Routed form instead.
locked AS MATERIALIZED (
    SELECT input.*, @organization_id::uuid AS organization_id
    FROM (SELECT * FROM input ORDER BY id) input
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT 1
        FROM job_queue jq
        WHERE jq.organization_id = @organization_id
          AND jq.id = input.id
          AND jq.run_number = input.run_number
          AND jq.attempt = input.attempt
          AND jq.worker_id = input.worker_id
          AND jq.status::text = 'LEASED'
          AND jq.lease_expires_at > clock.at
        FOR NO KEY UPDATE OF jq
    ) lease
),
completed AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = 'SUCCEEDED',
        stage = 'completed',
        output = locked.output,
        progress_done = COALESCE(locked.progress_done, jq.progress_done),
        progress_total = COALESCE(locked.progress_total, jq.progress_total),
        finished_at = clock.now,
        lease_expires_at = NULL
    FROM locked, clock
    WHERE jq.organization_id = locked.organization_id
      AND jq.id = locked.id
    RETURNING jq.*
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload)
    SELECT organization_id, id, run_number, attempt, 'SUCCEEDED', stage, progress_done, progress_total,
           jsonb_build_object('worker_id', worker_id)
    FROM completed
)
SELECT * FROM completed;

-- JobCompleteManyRouted is JobCompleteMany without its events, in the
-- shape Citus runs in one step on the tenant's shard (JobCompleteMany's
-- event INSERT in a CTE would be planned as steps of their own, the
-- updated rows sent through the coordinator to every worker); the library
-- sends it on Citus, and JobEventSucceededMany after it, in one
-- transaction, with the rows it returned. The clock is
-- statement_timestamp(), the start of the statement: Citus refuses the
-- volatile clock_timestamp() in a routed write. In a subquery of the
-- UPDATE, Citus evaluates now() and statement_timestamp() once on the
-- coordinator (as it evaluated JobCompleteMany's clock), so now() is the
-- one the events' occurred_at gets there; OFFSET 0 keeps the subquery
-- apart, so the shard's planner reads the jobs by id rather than by lease
-- expiry.
-- name: JobCompleteManyRouted :many
WITH input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id,
           i.outputs AS output,
           NULLIF((@progress_done::bigint[])[i.ord], -1) AS progress_done,
           NULLIF((@progress_total::bigint[])[i.ord], -1) AS progress_total
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[]), unnest(@outputs::jsonb[])) WITH ORDINALITY AS i(id, worker_ids, outputs, ord)
),
completed AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = 'SUCCEEDED',
        stage = 'completed',
        output = input.output,
        progress_done = COALESCE(input.progress_done, jq.progress_done),
        progress_total = COALESCE(input.progress_total, jq.progress_total),
        finished_at = clock.now,
        lease_expires_at = NULL
    FROM input, (SELECT now() AS now, statement_timestamp() AS at OFFSET 0) clock
    WHERE jq.organization_id = @organization_id
      AND jq.id = input.id
      AND jq.run_number = input.run_number
      AND jq.attempt = input.attempt
      AND jq.worker_id = input.worker_id
      AND jq.status = 'LEASED'
      AND jq.lease_expires_at > clock.at
    RETURNING jq.*
)
SELECT * FROM completed;

-- JobEventSucceededMany writes the SUCCEEDED event of each job
-- JobCompleteManyRouted completed (@ids with, at the same position, the
-- run, attempt, stage, progress (-1: NULL) and worker of the row it
-- returned), as JobCompleteMany's own event. It reads no table, so on
-- Citus the coordinator draws the event ids and sends the rows to the
-- tenant's shard in one step.
-- name: JobEventSucceededMany :exec
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload)
SELECT @organization_id, e.id, (@run_numbers::int[])[e.ord], (@attempts::int[])[e.ord], 'SUCCEEDED',
       e.stages,
       NULLIF((@progress_done::bigint[])[e.ord], -1), NULLIF((@progress_total::bigint[])[e.ord], -1),
       jsonb_build_object('worker_id', e.worker_ids)
FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@stages::text[]), unnest(@worker_ids::text[])) WITH ORDINALITY AS e(id, stages, worker_ids, ord);

-- JobFailMany records failed attempts of leased jobs. A job with attempts
-- left whose entry is not terminal goes back to PENDING, stage scheduled,
-- due after its retry delay, worker cleared, with a RETRY_SCHEDULED event;
-- any other is DEAD_LETTERED (finished) with a DEAD_LETTERED event. The
-- error code and message ('' stores NULL) are stored on the job and, with
-- the failure kind, in the event. Progress (-1: keep) and a checkpoint
-- (NULL: keep) the attempt reported last are stored with the failure, so
-- a retry resumes from them; the event carries the progress. Leaving
-- LEASED releases a job's execution resource claim (trigger).
-- name: JobFailMany :many
WITH clock AS (
    SELECT now() AS now, clock_timestamp() AS at
),
input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id,
           (@terminal::bool[])[i.ord] AS terminal,
           i.failure_kinds AS failure_kind,
           (@retry_delay_seconds::float8[])[i.ord] AS retry_delay_seconds,
           NULLIF(i.error_codes, '') AS error_code,
           NULLIF(i.error_messages, '') AS error_message,
           NULLIF((@progress_done::bigint[])[i.ord], -1) AS progress_done,
           NULLIF((@progress_total::bigint[])[i.ord], -1) AS progress_total,
           i.checkpoints AS checkpoint,
           clock.now + make_interval(secs => (@retry_delay_seconds::float8[])[i.ord]) AS retry_at,
           clock.now, clock.at
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[]), unnest(@failure_kinds::text[]), unnest(@error_codes::text[]), unnest(@error_messages::text[]), unnest(@checkpoints::jsonb[])) WITH ORDINALITY AS i(id, worker_ids, failure_kinds, error_codes, error_messages, checkpoints, ord)
    CROSS JOIN clock
),
locked AS MATERIALIZED (
    SELECT input.*, @organization_id::uuid AS organization_id
    FROM (SELECT * FROM input ORDER BY id) input
    CROSS JOIN LATERAL (
        SELECT 1
        FROM job_queue jq
        WHERE jq.organization_id = @organization_id
          AND jq.id = input.id
          AND jq.run_number = input.run_number
          AND jq.attempt = input.attempt
          AND jq.worker_id = input.worker_id
          AND jq.status::text = 'LEASED'
          AND jq.lease_expires_at > input.at
        FOR NO KEY UPDATE OF jq
    ) lease
),
failed AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = CASE WHEN locked.terminal OR jq.attempt >= jq.max_attempts
                      THEN 'DEAD_LETTERED'::job_status ELSE 'PENDING'::job_status END,
        stage = CASE WHEN locked.terminal OR jq.attempt >= jq.max_attempts
                     THEN jq.stage ELSE 'scheduled' END,
        next_run_at = CASE WHEN locked.terminal OR jq.attempt >= jq.max_attempts
                           THEN jq.next_run_at
                           ELSE locked.retry_at END,
        finished_at = CASE WHEN locked.terminal OR jq.attempt >= jq.max_attempts THEN locked.now END,
        worker_id = CASE WHEN locked.terminal OR jq.attempt >= jq.max_attempts THEN jq.worker_id END,
        lease_expires_at = NULL,
        last_error_code = locked.error_code,
        last_error_message = locked.error_message,
        progress_done = COALESCE(locked.progress_done, jq.progress_done),
        progress_total = COALESCE(locked.progress_total, jq.progress_total),
        checkpoint = COALESCE(locked.checkpoint, jq.checkpoint)
    FROM locked
    WHERE jq.organization_id = locked.organization_id
      AND jq.id = locked.id
    RETURNING jq.*, locked.failure_kind
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload)
    SELECT organization_id, id, run_number, attempt,
           CASE WHEN status = 'DEAD_LETTERED' THEN 'DEAD_LETTERED'::job_event_type
                ELSE 'RETRY_SCHEDULED'::job_event_type END,
           stage, progress_done, progress_total,
           jsonb_strip_nulls(jsonb_build_object(
               'failure_kind', failure_kind,
               'error_code', last_error_code,
               'error_message', last_error_message,
               'next_run_at', CASE WHEN status = 'PENDING' THEN next_run_at END))
    FROM failed
)
SELECT id, job_type, organization_id, payload, status, priority, run_number, attempt, max_attempts,
       timeout_seconds, next_run_at, lease_expires_at, last_heartbeat_at, worker_id, started_at,
       finished_at, stage, progress_done, progress_total, progress_pct, checkpoint, idempotency_key,
       status_reason, last_error_code, last_error_message, created_at, updated_at, enqueue_request,
       output, execution_resource_key
FROM failed;

-- JobFailManyRouted is JobFailMany without its events, for Citus as
-- JobCompleteManyRouted is for JobCompleteMany (clock
-- statement_timestamp()); JobEventFailedMany writes the events from its
-- rows, in its transaction.
-- name: JobFailManyRouted :many
WITH input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id,
           (@terminal::bool[])[i.ord] AS terminal,
           i.failure_kinds AS failure_kind,
           (@retry_delay_seconds::float8[])[i.ord] AS retry_delay_seconds,
           NULLIF(i.error_codes, '') AS error_code,
           NULLIF(i.error_messages, '') AS error_message,
           NULLIF((@progress_done::bigint[])[i.ord], -1) AS progress_done,
           NULLIF((@progress_total::bigint[])[i.ord], -1) AS progress_total,
           i.checkpoints AS checkpoint,
           clock.now + make_interval(secs => (@retry_delay_seconds::float8[])[i.ord]) AS retry_at,
           clock.now, clock.at
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[]), unnest(@failure_kinds::text[]), unnest(@error_codes::text[]), unnest(@error_messages::text[]), unnest(@checkpoints::jsonb[])) WITH ORDINALITY AS i(id, worker_ids, failure_kinds, error_codes, error_messages, checkpoints, ord)
    CROSS JOIN (SELECT now() AS now, statement_timestamp() AS at OFFSET 0) clock
),
failed AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = CASE WHEN input.terminal OR jq.attempt >= jq.max_attempts
                      THEN 'DEAD_LETTERED'::job_status ELSE 'PENDING'::job_status END,
        stage = CASE WHEN input.terminal OR jq.attempt >= jq.max_attempts
                     THEN jq.stage ELSE 'scheduled' END,
        next_run_at = CASE WHEN input.terminal OR jq.attempt >= jq.max_attempts
                           THEN jq.next_run_at
                           ELSE input.retry_at END,
        finished_at = CASE WHEN input.terminal OR jq.attempt >= jq.max_attempts THEN input.now END,
        worker_id = CASE WHEN input.terminal OR jq.attempt >= jq.max_attempts THEN jq.worker_id END,
        lease_expires_at = NULL,
        last_error_code = input.error_code,
        last_error_message = input.error_message,
        progress_done = COALESCE(input.progress_done, jq.progress_done),
        progress_total = COALESCE(input.progress_total, jq.progress_total),
        checkpoint = COALESCE(input.checkpoint, jq.checkpoint)
    FROM input
    WHERE jq.organization_id = @organization_id
      AND jq.id = input.id
      AND jq.run_number = input.run_number
      AND jq.attempt = input.attempt
      AND jq.worker_id = input.worker_id
      AND jq.status = 'LEASED'
      AND jq.lease_expires_at > input.at
    RETURNING jq.*, input.failure_kind
)
SELECT id, job_type, organization_id, payload, status, priority, run_number, attempt, max_attempts,
       timeout_seconds, next_run_at, lease_expires_at, last_heartbeat_at, worker_id, started_at,
       finished_at, stage, progress_done, progress_total, progress_pct, checkpoint, idempotency_key,
       status_reason, last_error_code, last_error_message, created_at, updated_at, enqueue_request,
       output, execution_resource_key
FROM failed;

-- JobEventFailedMany writes the event of each failed attempt
-- JobFailManyRouted (or, for an expired lease, JobRecoverExpiredLeasesTenant)
-- recorded (@ids with, at the same position, the run,
-- attempt, stage, whether the job was DEAD_LETTERED, the failure kind,
-- the stored error code and message ('' for none), the progress (-1:
-- NULL) and the retry's due time of the row it returned), as
-- JobFailMany's own events: one
-- query, no table read, one step on Citus.
-- name: JobEventFailedMany :exec
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload)
SELECT @organization_id, e.id, (@run_numbers::int[])[e.ord], (@attempts::int[])[e.ord],
       CASE WHEN (@dead_lettered::bool[])[e.ord] THEN 'DEAD_LETTERED'::job_event_type
            ELSE 'RETRY_SCHEDULED'::job_event_type END,
       e.stages,
       NULLIF((@progress_done::bigint[])[e.ord], -1), NULLIF((@progress_total::bigint[])[e.ord], -1),
       jsonb_strip_nulls(jsonb_build_object(
           'failure_kind', e.failure_kinds,
           'error_code', NULLIF(e.error_codes, ''),
           'error_message', NULLIF(e.error_messages, ''),
           'next_run_at', CASE WHEN NOT (@dead_lettered::bool[])[e.ord] THEN (@next_run_ats::timestamptz[])[e.ord] END))
FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@stages::text[]), unnest(@failure_kinds::text[]), unnest(@error_codes::text[]), unnest(@error_messages::text[])) WITH ORDINALITY AS e(id, stages, failure_kinds, error_codes, error_messages, ord);

-- JobHeartbeatMany renews held leases: lease_expires_at = the database
-- clock + the entry's lease, last_heartbeat_at = the clock, and, where the
-- entry gives them, progress (-1: keep) and a checkpoint (NULL: keep). A
-- renewed lease carries its new expiry to the job's execution resource
-- claim (trigger). An entry whose progress or checkpoint differs from the
-- stored one writes one PROGRESS event; a plain heartbeat writes none.
-- (The locked CTE returns the stored progress and checkpoint as they were
-- before the update, to tell a change.)
-- name: JobHeartbeatMany :many
WITH clock AS (
    SELECT clock_timestamp() AS at
),
input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id,
           clock.at + make_interval(secs => (@lease_seconds::float8[])[i.ord]) AS lease_until,
           NULLIF((@progress_done::bigint[])[i.ord], -1) AS progress_done,
           NULLIF((@progress_total::bigint[])[i.ord], -1) AS progress_total,
           i.checkpoints AS checkpoint,
           clock.at
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[]), unnest(@checkpoints::jsonb[])) WITH ORDINALITY AS i(id, worker_ids, checkpoints, ord)
    CROSS JOIN clock
),
locked AS MATERIALIZED (
    SELECT input.*, @organization_id::uuid AS organization_id,
           lease.progress_done AS stored_progress_done,
           lease.progress_total AS stored_progress_total,
           lease.checkpoint AS stored_checkpoint
    FROM (SELECT * FROM input ORDER BY id) input
    CROSS JOIN LATERAL (
        SELECT jq.progress_done, jq.progress_total, jq.checkpoint
        FROM job_queue jq
        WHERE jq.organization_id = @organization_id
          AND jq.id = input.id
          AND jq.run_number = input.run_number
          AND jq.attempt = input.attempt
          AND jq.worker_id = input.worker_id
          AND jq.status::text = 'LEASED'
          AND jq.lease_expires_at > input.at
        FOR NO KEY UPDATE OF jq
    ) lease
),
beat AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        lease_expires_at = locked.lease_until,
        last_heartbeat_at = locked.at,
        progress_done = COALESCE(locked.progress_done, jq.progress_done),
        progress_total = COALESCE(locked.progress_total, jq.progress_total),
        checkpoint = COALESCE(locked.checkpoint, jq.checkpoint)
    FROM locked
    WHERE jq.organization_id = locked.organization_id
      AND jq.id = locked.id
    RETURNING jq.organization_id, jq.id, jq.run_number, jq.attempt, jq.stage, jq.lease_expires_at,
              jq.last_heartbeat_at, jq.progress_done, jq.progress_total, jq.worker_id,
              ((jq.progress_done, jq.progress_total) IS DISTINCT FROM (locked.stored_progress_done, locked.stored_progress_total)
               OR jq.checkpoint IS DISTINCT FROM locked.stored_checkpoint)::bool AS changed
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload)
    SELECT organization_id, id, run_number, attempt, 'PROGRESS', stage, progress_done, progress_total,
           jsonb_build_object('worker_id', worker_id)
    FROM beat
    WHERE changed
)
SELECT id, organization_id, run_number, attempt, lease_expires_at, last_heartbeat_at,
       progress_done, progress_total, changed
FROM beat;

-- JobHeartbeatManyRouted is JobHeartbeatMany without its events, for
-- Citus as JobCompleteManyRouted is for JobCompleteMany (clock
-- statement_timestamp()), with each job's stage for the events;
-- JobEventProgressMany writes the PROGRESS events of the changed rows,
-- in its transaction.
-- name: JobHeartbeatManyRouted :many
WITH input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id,
           clock.at + make_interval(secs => (@lease_seconds::float8[])[i.ord]) AS lease_until,
           NULLIF((@progress_done::bigint[])[i.ord], -1) AS progress_done,
           NULLIF((@progress_total::bigint[])[i.ord], -1) AS progress_total,
           i.checkpoints AS checkpoint,
           clock.at
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[]), unnest(@checkpoints::jsonb[])) WITH ORDINALITY AS i(id, worker_ids, checkpoints, ord)
    CROSS JOIN (SELECT statement_timestamp() AS at OFFSET 0) clock
),
beat AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        lease_expires_at = input.lease_until,
        last_heartbeat_at = input.at,
        progress_done = COALESCE(input.progress_done, jq.progress_done),
        progress_total = COALESCE(input.progress_total, jq.progress_total),
        checkpoint = COALESCE(input.checkpoint, jq.checkpoint)
    FROM input
    JOIN job_queue before ON before.organization_id = @organization_id AND before.id = input.id
    WHERE jq.organization_id = @organization_id
      AND jq.id = input.id
      AND jq.run_number = input.run_number
      AND jq.attempt = input.attempt
      AND jq.worker_id = input.worker_id
      AND jq.status = 'LEASED'
      AND jq.lease_expires_at > input.at
    RETURNING jq.organization_id, jq.id, jq.run_number, jq.attempt, jq.stage, jq.lease_expires_at,
              jq.last_heartbeat_at, jq.progress_done, jq.progress_total, jq.worker_id,
              ((jq.progress_done, jq.progress_total) IS DISTINCT FROM (before.progress_done, before.progress_total)
               OR jq.checkpoint IS DISTINCT FROM before.checkpoint)::bool AS changed
)
SELECT id, organization_id, run_number, attempt, lease_expires_at, last_heartbeat_at,
       progress_done, progress_total, changed, stage
FROM beat;

-- JobEventProgressMany writes one PROGRESS event for each renewed lease
-- whose progress or checkpoint changed (@ids with, at the same position,
-- the run, attempt, stage, progress (-1: NULL) and worker of the row
-- JobHeartbeatManyRouted returned), as JobHeartbeatMany's own events: no
-- table read, one step on Citus.
-- name: JobEventProgressMany :exec
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload)
SELECT @organization_id, e.id, (@run_numbers::int[])[e.ord], (@attempts::int[])[e.ord], 'PROGRESS',
       e.stages,
       NULLIF((@progress_done::bigint[])[e.ord], -1), NULLIF((@progress_total::bigint[])[e.ord], -1),
       jsonb_build_object('worker_id', e.worker_ids)
FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@stages::text[]), unnest(@worker_ids::text[])) WITH ORDINALITY AS e(id, stages, worker_ids, ord);

-- JobReleaseMany hands leased jobs a worker has not started back, without
-- spending their attempt: PENDING again at attempt - 1, stage queued,
-- worker, lease, heartbeat and start cleared, due as they were; one
-- STAGE_CHANGED event each, naming the worker. Leaving LEASED releases a
-- job's execution resource claim (trigger).
-- name: JobReleaseMany :many
WITH input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[])) WITH ORDINALITY AS i(id, worker_ids, ord)
),
clock AS (
    SELECT clock_timestamp() AS at
),
-- As in JobCompleteMany: each entry's job is found by its key and locked
-- in a lateral subquery, entries in id order, and the update changes the
-- rows locked and only those. Joined with the entries, a tenant the
-- statistics did not know was read whole for every batch
-- (TestHotPlansStayBounded). The status is compared as text, so that no
-- partial index on status (the live jobs', the leases' expiry) serves
-- the lookup instead of the key.
locked AS MATERIALIZED (
    SELECT input.id, input.worker_id, @organization_id::uuid AS organization_id
    FROM (SELECT * FROM input ORDER BY id) input
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT 1
        FROM job_queue jq
        WHERE jq.organization_id = @organization_id
          AND jq.id = input.id
          AND jq.run_number = input.run_number
          AND jq.attempt = input.attempt
          AND jq.worker_id = input.worker_id
          AND jq.status::text = 'LEASED'
          AND jq.lease_expires_at > clock.at
        FOR NO KEY UPDATE OF jq
    ) lease
),
released AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = 'PENDING',
        attempt = jq.attempt - 1,
        stage = 'queued',
        worker_id = NULL,
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        started_at = NULL
    FROM locked
    WHERE jq.organization_id = locked.organization_id
      AND jq.id = locked.id
    RETURNING jq.*, locked.worker_id AS released_by
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload)
    SELECT organization_id, id, run_number, attempt + 1, 'STAGE_CHANGED', stage,
           jsonb_build_object('worker_id', released_by, 'released', true)
    FROM released
)
SELECT id, job_type, organization_id, payload, status, priority, run_number, attempt, max_attempts,
       timeout_seconds, next_run_at, lease_expires_at, last_heartbeat_at, worker_id, started_at,
       finished_at, stage, progress_done, progress_total, progress_pct, checkpoint, idempotency_key,
       status_reason, last_error_code, last_error_message, created_at, updated_at, enqueue_request,
       output, execution_resource_key
FROM released;

-- JobReleaseManyRouted is JobReleaseMany without its events, in the
-- shape Citus runs in one step on the tenant's shard; the library sends
-- it on Citus, and JobEventReleasedMany after it with the rows it
-- returned, in one transaction. As in JobCompleteManyRouted, the lease's
-- expiry is compared with statement_timestamp() (Citus refuses the
-- volatile clock_timestamp() in a routed write) and the status as the
-- enum (Citus refuses its cast to text there).
-- name: JobReleaseManyRouted :many
WITH input AS (
    SELECT i.id,
           (@run_numbers::int[])[i.ord] AS run_number,
           (@attempts::int[])[i.ord] AS attempt,
           i.worker_ids AS worker_id
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@worker_ids::text[])) WITH ORDINALITY AS i(id, worker_ids, ord)
),
released AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = 'PENDING',
        attempt = jq.attempt - 1,
        stage = 'queued',
        worker_id = NULL,
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        started_at = NULL
    FROM input, (SELECT statement_timestamp() AS at OFFSET 0) clock
    WHERE jq.organization_id = @organization_id
      AND jq.id = input.id
      AND jq.run_number = input.run_number
      AND jq.attempt = input.attempt
      AND jq.worker_id = input.worker_id
      AND jq.status = 'LEASED'
      AND jq.lease_expires_at > clock.at
    RETURNING jq.*
)
SELECT * FROM released;

-- JobEventReleasedMany writes the STAGE_CHANGED event of each job
-- JobReleaseManyRouted released (@ids with, at the same position, the
-- run, the attempt it had (the returned attempt + 1), the stage and the
-- worker whose lease the request named), as JobReleaseMany's own events:
-- no table read, one step on Citus.
-- name: JobEventReleasedMany :exec
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload)
SELECT @organization_id, e.id, (@run_numbers::int[])[e.ord], (@attempts::int[])[e.ord], 'STAGE_CHANGED',
       e.stages,
       jsonb_build_object('worker_id', e.worker_ids, 'released', true)
FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@stages::text[]), unnest(@worker_ids::text[])) WITH ORDINALITY AS e(id, stages, worker_ids, ord);

-- JobCancel cancels a PENDING or LEASED job of the caller's tenant,
-- records the reason as status_reason and writes one CANCELED event. A
-- leased job keeps lease_expires_at, so its execution resource stays
-- claimed until the canceled lease would have ended (trigger). No row when
-- the job is not in the tenant or already finished.
-- The event names @operator only when it is set (a NULL is stripped).
-- name: JobCancel :one
WITH clock AS (
    SELECT now() AS now
),
canceled AS (
    UPDATE job_queue
    SET updated_at = now(),
        status = 'CANCELED',
        status_reason = sqlc.narg(reason)::text,
        finished_at = clock.now
    FROM clock
    WHERE job_queue.organization_id = @organization_id
      AND job_queue.id = @id
      -- status as text: a partial index on status (the live jobs', the
      -- leases' expiry) cannot serve this lookup, so the plan stays
      -- the lookup by primary key even under statistics taken before
      -- the queue grew (the audit: TestHotPlansStayBounded).
      AND job_queue.status::text IN ('PENDING', 'LEASED')
    RETURNING job_queue.*
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload)
    SELECT organization_id, id, run_number, NULLIF(attempt, 0), 'CANCELED', stage,
           jsonb_strip_nulls(jsonb_build_object('reason', status_reason, 'operator', sqlc.narg(operator)::text))
    FROM canceled
)
SELECT * FROM canceled;

-- JobCancelRouted is JobCancel without its event, in the shape Citus runs
-- in one step on the tenant's shard; the library sends it on Citus, and
-- JobEventCanceled after it with the row it returned, in one transaction.
-- The status is compared as the enum: Citus refuses the cast to text (a
-- stable function of a column) in a routed write; the lookup is by
-- primary key either way.
-- name: JobCancelRouted :one
UPDATE job_queue
SET updated_at = now(),
    status = 'CANCELED',
    status_reason = sqlc.narg(reason)::text,
    finished_at = now()
WHERE job_queue.organization_id = @organization_id
  AND job_queue.id = @id
  AND job_queue.status IN ('PENDING', 'LEASED')
RETURNING job_queue.*;

-- JobEventCanceled writes the CANCELED event of the job JobCancelRouted
-- canceled (its run, attempt (0: NULL), stage and reason as the row
-- returned them), as JobCancel's own event, naming @operator only when it
-- is set. It reads no table: one step on Citus.
-- name: JobEventCanceled :exec
INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload)
VALUES (@organization_id, @job_id, @run_number::int, NULLIF(@attempt::int, 0), 'CANCELED', @stage::text,
        jsonb_strip_nulls(jsonb_build_object('reason', sqlc.narg(reason)::text, 'operator', sqlc.narg(operator)::text)));

-- JobRecoverExpiredLeases takes back up to @max_jobs leases of every
-- tenant that ran out by the database clock (oldest expiry first),
-- skipping rows another transaction holds, and only while this transaction
-- holds the recovery advisory lock @lock_key (taken here, without waiting,
-- until the transaction ends): one recoverer at a time across processes,
-- the others recover nothing. Each expired attempt counts as spent and
-- records failure kind LEASE_EXPIRED: a job with attempts left returns to
-- PENDING, stage scheduled, due after the retry delay
-- (@backoff_base_seconds doubled per attempt, at most
-- @backoff_max_seconds), with a RETRY_SCHEDULED event; one without is
-- DEAD_LETTERED with a DEAD_LETTERED event. Leaving LEASED releases any
-- resource claim (trigger). Over every tenant, so not on Citus: there
-- recovery is JobListTenantsWithExpiredLeases, then
-- JobRecoverExpiredLeasesTenant tenant by tenant (and its events,
-- JobEventFailedMany), under the lock that TransactionTryRecoveryLock takes.
-- name: JobRecoverExpiredLeases :many
WITH clock AS (
    SELECT now() AS now, clock_timestamp() AS at
),
expired AS (
    SELECT organization_id, id
    FROM job_queue
    WHERE status = 'LEASED'
      -- The clock read once (an InitPlan), not clock_timestamp() per row: a
      -- volatile call cannot bound an index range, and the scan would read
      -- every lease to find the expired ones.
      AND lease_expires_at < (SELECT at FROM clock)
      AND pg_try_advisory_xact_lock(@lock_key::bigint)
    ORDER BY lease_expires_at
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
),
recovered AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = CASE WHEN jq.attempt >= jq.max_attempts
                      THEN 'DEAD_LETTERED'::job_status ELSE 'PENDING'::job_status END,
        stage = CASE WHEN jq.attempt >= jq.max_attempts THEN jq.stage ELSE 'scheduled' END,
        next_run_at = CASE WHEN jq.attempt >= jq.max_attempts THEN jq.next_run_at
                           ELSE clock.now + make_interval(secs => least(sqlc.arg(backoff_max_seconds)::float8,
                                    sqlc.arg(backoff_base_seconds)::float8 * power(2, least(greatest(jq.attempt, 1) - 1, 40)))) END,
        finished_at = CASE WHEN jq.attempt >= jq.max_attempts THEN clock.now END,
        worker_id = CASE WHEN jq.attempt >= jq.max_attempts THEN jq.worker_id END,
        lease_expires_at = NULL,
        last_error_code = 'job.lease_expired',
        last_error_message = 'The lease expired before the worker finished.'
    FROM expired, clock
    WHERE jq.organization_id = expired.organization_id
      AND jq.id = expired.id
    RETURNING jq.*
),
event AS (
    INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, stage, payload)
    SELECT organization_id, id, run_number, attempt,
           CASE WHEN status = 'DEAD_LETTERED' THEN 'DEAD_LETTERED'::job_event_type
                ELSE 'RETRY_SCHEDULED'::job_event_type END,
           stage,
           jsonb_strip_nulls(jsonb_build_object(
               'failure_kind', 'LEASE_EXPIRED',
               'error_code', last_error_code,
               'next_run_at', CASE WHEN status = 'PENDING' THEN next_run_at END))
    FROM recovered
)
SELECT * FROM recovered;

-- JobListTenantsWithExpiredLeases lists up to @max_tenants tenants holding
-- leases that ran out by the database clock, the oldest expiry first,
-- without a lock (on Citus: one query on every shard).
-- name: JobListTenantsWithExpiredLeases :many
SELECT organization_id
FROM job_queue
WHERE status = 'LEASED'
  AND lease_expires_at < clock_timestamp()
GROUP BY organization_id
ORDER BY min(lease_expires_at)
LIMIT @max_tenants;

-- JobRecoverExpiredLeasesTenant is JobRecoverExpiredLeases for one tenant
-- (@organization_id), on Citus, where recovery goes tenant by tenant; the
-- caller holds the recovery lock (TransactionTryRecoveryLock). Without its
-- events: an INSERT in a CTE would make Citus plan the statement in steps
-- through the coordinator. JobEventFailedMany writes them from the rows it
-- returned, in its transaction (failure kind LEASE_EXPIRED, the stored
-- error code, no message, no progress: JobRecoverExpiredLeases's events).
-- A locking SELECT and an UPDATE over the tenant's rows: one step on the
-- tenant's shard.
-- name: JobRecoverExpiredLeasesTenant :many
WITH expired AS (
    SELECT job_queue.organization_id, job_queue.id, now() AS now,
           now() + make_interval(secs => least(sqlc.arg(backoff_max_seconds)::float8,
               sqlc.arg(backoff_base_seconds)::float8 * power(2, least(greatest(job_queue.attempt, 1) - 1, 40)))) AS retry_at
    FROM job_queue
    WHERE job_queue.status = 'LEASED'
      AND job_queue.organization_id = @organization_id
      AND job_queue.lease_expires_at < clock_timestamp()
    ORDER BY job_queue.lease_expires_at
    LIMIT @max_jobs
    FOR UPDATE OF job_queue SKIP LOCKED
),
recovered AS (
    UPDATE job_queue jq
    SET updated_at = now(),
        status = CASE WHEN jq.attempt >= jq.max_attempts
                      THEN 'DEAD_LETTERED'::job_status ELSE 'PENDING'::job_status END,
        stage = CASE WHEN jq.attempt >= jq.max_attempts THEN jq.stage ELSE 'scheduled' END,
        next_run_at = CASE WHEN jq.attempt >= jq.max_attempts THEN jq.next_run_at ELSE expired.retry_at END,
        finished_at = CASE WHEN jq.attempt >= jq.max_attempts THEN expired.now END,
        worker_id = CASE WHEN jq.attempt >= jq.max_attempts THEN jq.worker_id END,
        lease_expires_at = NULL,
        last_error_code = 'job.lease_expired',
        last_error_message = 'The lease expired before the worker finished.'
    FROM expired
    WHERE jq.organization_id = @organization_id
      AND jq.id = expired.id
    RETURNING jq.*
)
SELECT * FROM recovered;

-- JobListPage lists the jobs of one tenant newest first, a page at a time:
-- pass the last row's (created_at, id) as the cursor for the next page, or
-- NULLs for the first. No lock.
-- name: JobListPage :many
SELECT * FROM job_queue
WHERE organization_id = @organization_id
  AND (sqlc.narg(before_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT @max_jobs;

-- JobListPageAll lists jobs of every tenant newest first (operators only),
-- with the same cursor as JobListPage. No lock (on Citus: every shard,
-- merged on the coordinator).
-- name: JobListPageAll :many
SELECT * FROM job_queue
WHERE sqlc.narg(before_created_at)::timestamptz IS NULL
   OR (created_at, id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.narg(before_id)::uuid)
ORDER BY created_at DESC, id DESC
LIMIT @max_jobs;

-- JobListByStatus lists the newest jobs of one tenant in one status.
-- name: JobListByStatus :many
SELECT * FROM job_queue
WHERE organization_id = @organization_id
  AND status = @status
ORDER BY created_at DESC
LIMIT @max_jobs;

-- JobListByTypeAndStatus lists the newest jobs of one type in one status,
-- across tenants (operators only; on Citus every shard).
-- name: JobListByTypeAndStatus :many
SELECT * FROM job_queue
WHERE job_type = @job_type
  AND status = @status
ORDER BY created_at DESC
LIMIT @max_jobs;

-- JobListFiltered lists jobs newest first, a page at a time (the cursor
-- as JobListPage's), keeping only those that match every filter set: a
-- tenant (@organization_id, NULL for every tenant: an operator's view),
-- status, job type, last error code, and finished_at within
-- [@finished_since, @finished_until). It walks the newest-first index and
-- stops at @max_jobs matches, so a page never counts the history; a
-- filter that matches few jobs reads further back. (Each optional filter
-- is a CASE, which the planner does not take for selective, so a generic
-- plan walks the index rather than sorting the table.) No lock.
-- name: JobListFiltered :many
SELECT * FROM job_queue
WHERE CASE WHEN sqlc.narg(organization_id)::uuid IS NULL THEN true
           ELSE organization_id = sqlc.narg(organization_id)::uuid END
  AND CASE WHEN sqlc.narg(status)::job_status IS NULL THEN true
           ELSE status = sqlc.narg(status)::job_status END
  AND CASE WHEN sqlc.narg(job_type)::text IS NULL THEN true
           ELSE job_type = sqlc.narg(job_type)::text END
  AND CASE WHEN sqlc.narg(error_code)::text IS NULL THEN true
           ELSE last_error_code IS NOT DISTINCT FROM sqlc.narg(error_code)::text END
  AND CASE WHEN sqlc.narg(finished_since)::timestamptz IS NULL THEN true
           ELSE finished_at >= sqlc.narg(finished_since)::timestamptz END
  AND CASE WHEN sqlc.narg(finished_until)::timestamptz IS NULL THEN true
           ELSE finished_at < sqlc.narg(finished_until)::timestamptz END
  AND (sqlc.narg(before_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT @max_jobs;

-- JobLockForReplay locks a replay source FOR NO KEY UPDATE while it is
-- eligible: in the caller's tenant, SUCCEEDED at the expected run, in no
-- workflow step, and without lineage for the request (source, run, key).
-- NO KEY UPDATE lets the lineage insert's KEY SHARE foreign-key check
-- through while two replays of one source serialize here; a waiter
-- re-checks the conditions on the newest row. It follows the lineage
-- lookup in the replay's pipeline, and its guard is in the data: lineage
-- the lookup found (or that appeared since) keeps it from locking.
-- name: JobLockForReplay :one
SELECT id, run_number, job_type, execution_resource_key
FROM job_queue
WHERE job_queue.organization_id = @organization_id
  AND job_queue.id = @id
  AND status = 'SUCCEEDED'
  AND run_number = @expected_run_number
  AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                  WHERE ws.organization_id = @organization_id AND ws.job_id = job_queue.id)
  AND NOT EXISTS (SELECT 1 FROM job_replays jr
                  WHERE jr.organization_id = @organization_id AND jr.source_job_id = job_queue.id
                    AND jr.source_run_number = @expected_run_number AND jr.replay_request_key = @replay_request_key)
  AND lower(current_setting('transaction_isolation')) IN ('read committed', 'read uncommitted')
FOR NO KEY UPDATE;

-- JobGetForReplayClassification reads the replay source in the caller's
-- tenant without a lock, to tell NotFound, a mismatch and a
-- workflow-managed source apart when the locking read returned nothing.
-- job is the whole row as one jsonb value, only for a mismatch (not
-- SUCCEEDED at @expected_run_number; NULL otherwise), its timestamps in
-- UTC so that they parse as RFC 3339 whatever the session's TimeZone, for
-- any year from 1 to 9999 (written without a to_char pattern: pgbench
-- would take its ":MI" for a variable).
-- name: JobGetForReplayClassification :one
SELECT job_queue.status,
       job_queue.run_number,
       EXISTS (SELECT 1 FROM workflow_steps ws
               WHERE ws.organization_id = @organization_id AND ws.job_id = job_queue.id) AS workflow_managed,
       (CASE WHEN job_queue.status <> 'SUCCEEDED' OR job_queue.run_number <> @expected_run_number THEN
        to_jsonb(job_queue) || jsonb_build_object(
           'next_run_at', (to_jsonb(next_run_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'lease_expires_at', (to_jsonb(lease_expires_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'last_heartbeat_at', (to_jsonb(last_heartbeat_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'started_at', (to_jsonb(started_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'finished_at', (to_jsonb(finished_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'created_at', (to_jsonb(created_at AT TIME ZONE 'UTC') #>> '{}') || 'Z',
           'updated_at', (to_jsonb(updated_at AT TIME ZONE 'UTC') #>> '{}') || 'Z') END)::jsonb AS job
FROM job_queue
WHERE job_queue.organization_id = @organization_id
  AND job_queue.id = @id;
