-- Queue health and retention: the stats of the live queue and of a recent
-- window of finished jobs, and the prune of finished jobs, a lineage
-- family at a time.

-- JobStatsTenant summarizes one tenant's (@organization_id) queue per job
-- type (every type, or only sqlc.narg(job_type)), at the database clock
-- (now(), read once): the exact PENDING counts due by now and scheduled for
-- later, the LEASED count and how many of those leases ran out without a
-- recovery yet, the age of the oldest due job in seconds; and over the
-- window [now - @window_seconds, now) by finished_at, the SUCCEEDED,
-- DEAD_LETTERED and CANCELED counts with the p50 and p95 run time
-- (finished_at - started_at, in seconds) of the window's jobs that ran.
-- Its cost follows the live queue (idx_job_queue_live_type) and the window
-- (idx_job_queue_scope_finished), never the history. Per live job it does
-- as little as it can: the jobs are grouped by type and status in the
-- index's order (two counts with a condition and a min each; the oldest
-- due job is the first PENDING one when any is due), and the per-type
-- figures are summed from those few groups; the run times are float8
-- seconds (date_part, not extract's numeric), gathered per type into an
-- array by a hashed grouping, and both percentiles come from one sort of
-- each type's array (percentile_cont under GROUP BY would first sort the
-- whole window by type, then each type again). The clock is now()
-- throughout (one value in a transaction). The clock row also calls
-- current_schema(), which PostgreSQL marks parallel-unsafe (13 to 18), so
-- the statement is always planned without parallel workers: their start-up
-- cost more than the statement's whole work (at 10,000,000 jobs the call
-- took 176 ms with a Gather, 19 ms without; docs/PERFORMANCE.md). It
-- always returns a row: a row with an empty job type carries only the
-- clock. The age is 0 without due jobs, and the run times 0 when none of
-- the window's jobs ran (ran counts those that did). paused says the
-- type's definition is paused (flow control; false without a definition).
-- No lock.
-- name: JobStatsTenant :many
WITH clock AS MATERIALIZED (
    SELECT now() AS now, current_schema() AS serial_plan
),
live_status AS (
    SELECT jq.job_type, jq.status,
           count(*) AS jobs,
           count(*) FILTER (WHERE jq.next_run_at <= now()) AS due,
           count(*) FILTER (WHERE jq.lease_expires_at <= now()) AS expired,
           min(jq.next_run_at) AS first_run_at
    FROM job_queue jq
    WHERE jq.organization_id = @organization_id
      AND jq.status IN ('PENDING', 'LEASED')
      AND (sqlc.narg(job_type)::text IS NULL OR jq.job_type = sqlc.narg(job_type)::text)
    GROUP BY jq.job_type, jq.status
),
live AS (
    SELECT job_type,
           sum(due) FILTER (WHERE status = 'PENDING') AS pending_due,
           sum(jobs - due) FILTER (WHERE status = 'PENDING') AS pending_scheduled,
           sum(jobs) FILTER (WHERE status = 'LEASED') AS leased,
           sum(expired) FILTER (WHERE status = 'LEASED') AS expired_leases,
           min(first_run_at) FILTER (WHERE status = 'PENDING' AND due > 0) AS oldest_due_at
    FROM live_status
    GROUP BY job_type
),
finished AS MATERIALIZED (
    SELECT jq.job_type, jq.status, date_part('epoch', jq.finished_at - jq.started_at) AS run_seconds
    FROM job_queue jq
    WHERE jq.organization_id = @organization_id
      AND jq.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
      AND jq.finished_at >= now() - sqlc.arg(window_seconds)::float8 * interval '1 second'
      AND jq.finished_at < now()
      AND (sqlc.narg(job_type)::text IS NULL OR jq.job_type = sqlc.narg(job_type)::text)
),
recent_runs AS (
    SELECT job_type,
           count(*) FILTER (WHERE status = 'SUCCEEDED') AS succeeded,
           count(*) FILTER (WHERE status = 'DEAD_LETTERED') AS dead_lettered,
           count(*) FILTER (WHERE status = 'CANCELED') AS canceled,
           count(run_seconds) AS ran,
           array_agg(run_seconds) FILTER (WHERE run_seconds IS NOT NULL) AS runs
    FROM finished
    GROUP BY job_type
),
recent AS (
    SELECT r.job_type, r.succeeded, r.dead_lettered, r.canceled, r.ran,
           (SELECT percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY x) FROM unnest(r.runs) x) AS run_p
    FROM recent_runs r
),
types AS (
    SELECT coalesce(l.job_type, r.job_type) AS job_type,
           l.pending_due, l.pending_scheduled, l.leased, l.expired_leases, l.oldest_due_at,
           r.succeeded, r.dead_lettered, r.canceled, r.ran, r.run_p[1] AS run_p50, r.run_p[2] AS run_p95
    FROM live l FULL JOIN recent r ON r.job_type = l.job_type
)
SELECT c.now::timestamptz AS now,
       coalesce(t.job_type, '')::text AS job_type,
       coalesce(t.pending_due, 0)::bigint AS pending_due,
       coalesce(t.pending_scheduled, 0)::bigint AS pending_scheduled,
       coalesce(t.leased, 0)::bigint AS leased,
       coalesce(t.expired_leases, 0)::bigint AS expired_leases,
       coalesce(extract(epoch FROM c.now - t.oldest_due_at), 0)::float8 AS oldest_due_age_seconds,
       coalesce(t.succeeded, 0)::bigint AS succeeded,
       coalesce(t.dead_lettered, 0)::bigint AS dead_lettered,
       coalesce(t.canceled, 0)::bigint AS canceled,
       coalesce(t.ran, 0)::bigint AS ran,
       coalesce(t.run_p50, 0)::float8 AS run_p50_seconds,
       coalesce(t.run_p95, 0)::float8 AS run_p95_seconds,
       coalesce(d.is_paused, false)::bool AS paused
FROM clock c LEFT JOIN types t ON true
LEFT JOIN job_definitions d ON d.job_type = t.job_type
ORDER BY 2;

-- JobStatsAll is JobStatsTenant over every tenant, for an operator (on
-- Citus every shard counts its part; the window's run times are gathered
-- on the coordinator, which computes the percentiles). Its cost follows
-- the live queue (idx_job_queue_live_type, grouped by tenant, type and
-- status in the index's order, then summed per type) and the window
-- (idx_job_queue_finished). Never planned with parallel workers (as
-- JobStatsTenant). No lock.
-- name: JobStatsAll :many
WITH clock AS MATERIALIZED (
    SELECT now() AS now, current_schema() AS serial_plan
),
live_status AS (
    SELECT jq.organization_id, jq.job_type, jq.status,
           count(*) AS jobs,
           count(*) FILTER (WHERE jq.next_run_at <= now()) AS due,
           count(*) FILTER (WHERE jq.lease_expires_at <= now()) AS expired,
           min(jq.next_run_at) AS first_run_at
    FROM job_queue jq
    WHERE jq.status IN ('PENDING', 'LEASED')
      AND (sqlc.narg(job_type)::text IS NULL OR jq.job_type = sqlc.narg(job_type)::text)
    GROUP BY jq.organization_id, jq.job_type, jq.status
),
live AS (
    SELECT job_type,
           sum(due) FILTER (WHERE status = 'PENDING') AS pending_due,
           sum(jobs - due) FILTER (WHERE status = 'PENDING') AS pending_scheduled,
           sum(jobs) FILTER (WHERE status = 'LEASED') AS leased,
           sum(expired) FILTER (WHERE status = 'LEASED') AS expired_leases,
           min(first_run_at) FILTER (WHERE status = 'PENDING' AND due > 0) AS oldest_due_at
    FROM live_status
    GROUP BY job_type
),
finished AS MATERIALIZED (
    SELECT jq.job_type, jq.status, date_part('epoch', jq.finished_at - jq.started_at) AS run_seconds
    FROM job_queue jq
    WHERE jq.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
      AND jq.finished_at >= now() - sqlc.arg(window_seconds)::float8 * interval '1 second'
      AND jq.finished_at < now()
      AND (sqlc.narg(job_type)::text IS NULL OR jq.job_type = sqlc.narg(job_type)::text)
),
recent_runs AS (
    SELECT job_type,
           count(*) FILTER (WHERE status = 'SUCCEEDED') AS succeeded,
           count(*) FILTER (WHERE status = 'DEAD_LETTERED') AS dead_lettered,
           count(*) FILTER (WHERE status = 'CANCELED') AS canceled,
           count(run_seconds) AS ran,
           array_agg(run_seconds) FILTER (WHERE run_seconds IS NOT NULL) AS runs
    FROM finished
    GROUP BY job_type
),
recent AS (
    SELECT r.job_type, r.succeeded, r.dead_lettered, r.canceled, r.ran,
           (SELECT percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY x) FROM unnest(r.runs) x) AS run_p
    FROM recent_runs r
),
types AS (
    SELECT coalesce(l.job_type, r.job_type) AS job_type,
           l.pending_due, l.pending_scheduled, l.leased, l.expired_leases, l.oldest_due_at,
           r.succeeded, r.dead_lettered, r.canceled, r.ran, r.run_p[1] AS run_p50, r.run_p[2] AS run_p95
    FROM live l FULL JOIN recent r ON r.job_type = l.job_type
)
SELECT c.now::timestamptz AS now,
       coalesce(t.job_type, '')::text AS job_type,
       coalesce(t.pending_due, 0)::bigint AS pending_due,
       coalesce(t.pending_scheduled, 0)::bigint AS pending_scheduled,
       coalesce(t.leased, 0)::bigint AS leased,
       coalesce(t.expired_leases, 0)::bigint AS expired_leases,
       coalesce(extract(epoch FROM c.now - t.oldest_due_at), 0)::float8 AS oldest_due_age_seconds,
       coalesce(t.succeeded, 0)::bigint AS succeeded,
       coalesce(t.dead_lettered, 0)::bigint AS dead_lettered,
       coalesce(t.canceled, 0)::bigint AS canceled,
       coalesce(t.ran, 0)::bigint AS ran,
       coalesce(t.run_p50, 0)::float8 AS run_p50_seconds,
       coalesce(t.run_p95, 0)::float8 AS run_p95_seconds,
       coalesce(d.is_paused, false)::bool AS paused
FROM clock c LEFT JOIN types t ON true
LEFT JOIN job_definitions d ON d.job_type = t.job_type
ORDER BY 2;

-- JobPruneListTenants lists the tenants holding finished jobs of
-- @statuses (among SUCCEEDED, DEAD_LETTERED, CANCELED) that finished before
-- @cutoff, for a prune over every tenant, which then prunes tenant by
-- tenant. It reads what it would prune (idx_job_queue_finished), without
-- a lock (on Citus: one query on every shard).
-- name: JobPruneListTenants :many
SELECT DISTINCT organization_id
FROM job_queue
WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
  AND status = ANY((@statuses::text[])::job_status[])
  AND finished_at < @cutoff::timestamptz
ORDER BY organization_id;

-- JobPruneLockBatch takes the next batch of a prune in one tenant
-- (@organization_id): up to @batch_size candidates, the finished jobs of
-- @statuses that finished before @cutoff, after the keyset cursor
-- (@after_finished_at, @after_id) in (finished_at, id) order, and the
-- lineage family of each (every job job_replays links to it, in either
-- direction, transitively, in the tenant). It locks, FOR UPDATE SKIP
-- LOCKED, each family member that may be pruned: finished with one of
-- @statuses before @cutoff (re-checked on the newest row), owned by no
-- workflow step, holding no execution resource claim. A member that
-- another transaction holds (a worker, a replay, a requeue) is skipped,
-- never waited for. It returns every member with its family (the least
-- candidate id that reaches it), whether it is a candidate, whether it was
-- locked, and whether a workflow step owns it (looked up only for a member
-- it did not lock: a locked member has no step); a family is pruned only
-- when every member was locked (JobPruneDelete). Each member is looked
-- up and locked by its key (a lateral subquery), so a batch's cost follows
-- its families, never the tenant's history.
-- name: JobPruneLockBatch :many
WITH RECURSIVE candidates AS MATERIALIZED (
    SELECT jq.id, jq.finished_at
    FROM job_queue jq
    WHERE jq.organization_id = @organization_id
      AND jq.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
      AND jq.status = ANY((@statuses::text[])::job_status[])
      AND jq.finished_at < @cutoff::timestamptz
      AND (jq.finished_at, jq.id) > (@after_finished_at::timestamptz, @after_id::uuid)
    ORDER BY jq.finished_at, jq.id
    LIMIT @batch_size
),
walk (root, id) AS (
    SELECT id, id FROM candidates
    UNION
    SELECT w.root, n.id
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT jr.replay_job_id AS id FROM job_replays jr
        WHERE jr.organization_id = @organization_id AND jr.source_job_id = w.id
        UNION ALL
        SELECT jr.source_job_id FROM job_replays jr
        WHERE jr.organization_id = @organization_id AND jr.replay_job_id = w.id
    ) n
),
members AS MATERIALIZED (
    SELECT DISTINCT ON (id) id, root AS family FROM walk ORDER BY id, root
),
locked AS MATERIALIZED (
    SELECT l.id
    FROM members m
    CROSS JOIN LATERAL (
        SELECT jq.id
        FROM job_queue jq
        WHERE jq.organization_id = @organization_id
          AND jq.id = m.id
          AND jq.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
          AND jq.status = ANY((@statuses::text[])::job_status[])
          AND jq.finished_at < @cutoff::timestamptz
          AND NOT EXISTS (SELECT 1 FROM workflow_steps ws
                          WHERE ws.organization_id = @organization_id AND ws.job_id = jq.id)
          AND NOT EXISTS (SELECT 1 FROM job_execution_resource_claims rc
                          WHERE rc.organization_id = @organization_id AND rc.job_id = jq.id)
        FOR UPDATE SKIP LOCKED
    ) l
)
SELECT m.id::uuid AS id,
       m.family::uuid AS family,
       c.finished_at AS candidate_finished_at,
       (l.id IS NOT NULL)::bool AS locked,
       (CASE WHEN l.id IS NOT NULL THEN false
             ELSE EXISTS (SELECT 1 FROM workflow_steps ws
                          WHERE ws.organization_id = @organization_id AND ws.job_id = m.id) END)::bool AS workflow_owned
FROM members m
LEFT JOIN candidates c ON c.id = m.id
LEFT JOIN locked l ON l.id = m.id
ORDER BY m.family, m.id;

-- JobPruneCountEvents counts the events of @job_ids in one tenant
-- (@organization_id): what a dry run reports JobPruneDelete would delete.
-- name: JobPruneCountEvents :one
SELECT count(*)::bigint
FROM job_events
WHERE organization_id = @organization_id AND job_id = ANY(@job_ids::uuid[]);

-- JobPruneDelete deletes, in one tenant (@organization_id), the jobs of
-- @job_ids (each in the family @families gives it, the jobs
-- JobPruneLockBatch locked in this transaction) with their events, lineage
-- rows and claims, except every family that a lineage row now links to a
-- job outside the set (a replay committed after the batch's snapshot): the
-- locks keep new lineage from landing, and this statement's snapshot sees
-- what landed before. The events and the lineage rows are deleted here,
-- by key, beside their jobs: a family's lineage rows link only its own
-- members, so deleting them by replay_job_id (the primary key) takes them
-- all, and the foreign-key checks at the end of the statement find nothing
-- left, whatever order the jobs were deleted in (a replay deleted before
-- its source would otherwise still be referenced when its check ran). It
-- returns the jobs and the events deleted.
-- name: JobPruneDelete :one
WITH doomed AS (
    SELECT i.id, (@families::uuid[])[i.ord] AS family
    FROM unnest(@job_ids::uuid[]) WITH ORDINALITY AS i(id, ord)
),
linked AS (
    SELECT d.family
    FROM doomed d
    JOIN job_replays jr ON jr.organization_id = @organization_id
                       AND (jr.source_job_id = d.id OR jr.replay_job_id = d.id)
    WHERE NOT EXISTS (SELECT 1 FROM doomed o
                      WHERE o.id = CASE WHEN jr.source_job_id = d.id THEN jr.replay_job_id ELSE jr.source_job_id END)
),
gone AS MATERIALIZED (
    SELECT d.id FROM doomed d WHERE d.family NOT IN (SELECT family FROM linked)
),
events AS (
    DELETE FROM job_events e
    WHERE e.organization_id = @organization_id AND e.job_id IN (SELECT id FROM gone)
    RETURNING 1
),
-- The lineage rows by key, from an array built before the delete (an
-- InitPlan): joined with gone, the planner hashed a scan of every
-- lineage row of the table once it held a few thousand
-- (TestHotPlansStayBounded, whose history holds lineage).
lineage AS (
    DELETE FROM job_replays jr
    WHERE jr.organization_id = @organization_id AND jr.replay_job_id = ANY(ARRAY(SELECT id FROM gone))
),
deleted AS (
    DELETE FROM job_queue jq
    WHERE jq.organization_id = @organization_id AND jq.id IN (SELECT id FROM gone)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted)::bigint AS deleted_jobs,
       (SELECT count(*) FROM events)::bigint AS deleted_events;

-- JobPruneTryLock takes the scheduled prune's session advisory lock
-- @lock_key without waiting: false when another session holds it (one
-- scheduled prune at a time across processes). It is held until
-- JobPruneUnlock or the session ends. (On Citus the lock is the
-- coordinator's.)
-- name: JobPruneTryLock :one
SELECT pg_try_advisory_lock(@lock_key::bigint) AS acquired;

-- JobPruneUnlock releases the lock JobPruneTryLock took.
-- name: JobPruneUnlock :one
SELECT pg_advisory_unlock(@lock_key::bigint) AS released;
