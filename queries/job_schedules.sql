-- Schedules (job_schedules): every statement that addresses a schedule
-- names its tenant (@organization_id, the nil UUID for the global scope),
-- so that on Citus it runs on the tenant's shard. The statements over
-- every tenant (the one-server claim, the listing of tenants with due
-- schedules, the report of blocked schedules) say so. Cron arithmetic is
-- done in Go; the statements take the cursor it computes and the
-- database clock read at the start of the transaction (@now).

-- ScheduleGet reads one schedule of a tenant. No lock.
-- name: ScheduleGet :one
SELECT * FROM job_schedules
WHERE organization_id = @organization_id AND name = @name;

-- ScheduleLock reads one schedule of a tenant and locks it FOR UPDATE, so
-- that an upsert, pause or resume and a firer never interleave on it (a
-- firer skips it while it is held), together with the database clock.
-- name: ScheduleLock :one
SELECT sqlc.embed(job_schedules), now()::timestamptz AS now
FROM job_schedules
WHERE organization_id = @organization_id AND name = @name
FOR UPDATE;

-- ScheduleList lists a tenant's schedules by name, at most @max_rows.
-- No lock.
-- name: ScheduleList :many
SELECT * FROM job_schedules
WHERE organization_id = @organization_id
ORDER BY name
LIMIT @max_rows;

-- ScheduleInsert creates a schedule; nothing when the tenant already has
-- one of that name (a concurrent upsert won: the caller locks and updates
-- it instead).
-- name: ScheduleInsert :one
INSERT INTO job_schedules (
    organization_id, name, cron, tz, job_type, payload, priority, jitter_seconds,
    missed, missed_max, active, next_fire_at
) VALUES (
    @organization_id, @name, @cron, @tz, @job_type, @payload::jsonb, sqlc.narg(priority)::int, @jitter_seconds,
    @missed, @missed_max, @active, @next_fire_at
)
ON CONFLICT (organization_id, name) DO NOTHING
RETURNING *;

-- ScheduleUpdate replaces a locked schedule's settings and cursor.
-- name: ScheduleUpdate :one
UPDATE job_schedules
SET cron = @cron, tz = @tz, job_type = @job_type, payload = @payload::jsonb,
    priority = sqlc.narg(priority)::int, jitter_seconds = @jitter_seconds,
    missed = @missed, missed_max = @missed_max, active = @active,
    next_fire_at = @next_fire_at, updated_at = now()
WHERE organization_id = @organization_id AND name = @name
RETURNING *;

-- ScheduleSetActive pauses or resumes a locked schedule, with the cursor
-- the caller computed (a resume starts from the next tick).
-- name: ScheduleSetActive :one
UPDATE job_schedules
SET active = @active, next_fire_at = @next_fire_at, updated_at = now()
WHERE organization_id = @organization_id AND name = @name
RETURNING *;

-- ScheduleDelete deletes a schedule and returns it as it was (waiting for
-- a firer that holds it).
-- name: ScheduleDelete :one
DELETE FROM job_schedules
WHERE organization_id = @organization_id AND name = @name
RETURNING *;

-- ScheduleClaimDue locks up to @max_rows active schedules of every tenant
-- that are due at @now (the database clock of the firer's transaction),
-- oldest cursor first, of the given job types (every type when the array
-- is empty) whose definition is enabled, FOR UPDATE SKIP LOCKED: a
-- schedule another firer (or an upsert) holds is passed by, never waited
-- on. Over every tenant, so one server only; Citus claims tenant by
-- tenant (ScheduleListTenantsDue, ScheduleClaimDueTenant).
-- name: ScheduleClaimDue :many
SELECT * FROM job_schedules s
WHERE s.active
  AND s.next_fire_at <= @now::timestamptz
  AND (cardinality(@job_types::text[]) = 0 OR s.job_type = ANY(@job_types::text[]))
  AND EXISTS (SELECT 1 FROM job_definitions d WHERE d.job_type = s.job_type AND d.is_enabled)
ORDER BY s.next_fire_at
LIMIT @max_rows
FOR UPDATE OF s SKIP LOCKED;

-- ScheduleListTenantsDue lists up to @max_tenants tenants with an active
-- schedule due at @now of the given types (every type when empty), the
-- most overdue first. No lock; over every tenant (on Citus every shard).
-- name: ScheduleListTenantsDue :many
SELECT organization_id
FROM job_schedules s
WHERE s.active
  AND s.next_fire_at <= @now::timestamptz
  AND (cardinality(@job_types::text[]) = 0 OR s.job_type = ANY(@job_types::text[]))
GROUP BY organization_id
ORDER BY min(s.next_fire_at)
LIMIT @max_tenants;

-- ScheduleClaimDueTenant is ScheduleClaimDue for one tenant, a statement
-- Citus routes to the tenant's shard.
-- name: ScheduleClaimDueTenant :many
SELECT * FROM job_schedules s
WHERE s.organization_id = @organization_id
  AND s.active
  AND s.next_fire_at <= @now::timestamptz
  AND (cardinality(@job_types::text[]) = 0 OR s.job_type = ANY(@job_types::text[]))
  AND EXISTS (SELECT 1 FROM job_definitions d WHERE d.job_type = s.job_type AND d.is_enabled)
ORDER BY s.next_fire_at
LIMIT @max_rows
FOR UPDATE OF s SKIP LOCKED;

-- ScheduleListBlocked lists up to @max_rows active schedules due at @now
-- of the given types (every type when empty) whose definition is missing
-- or disabled: they are not fired and their cursor stays, and the firer
-- reports them. No lock; over every tenant.
-- name: ScheduleListBlocked :many
SELECT * FROM job_schedules s
WHERE s.active
  AND s.next_fire_at <= @now::timestamptz
  AND (cardinality(@job_types::text[]) = 0 OR s.job_type = ANY(@job_types::text[]))
  AND NOT EXISTS (SELECT 1 FROM job_definitions d WHERE d.job_type = s.job_type AND d.is_enabled)
ORDER BY s.next_fire_at
LIMIT @max_rows;

-- ScheduleAdvance moves a claimed schedule's cursor past the ticks its
-- firer handled, and records the last tick fired (kept when none was).
-- name: ScheduleAdvance :exec
UPDATE job_schedules
SET next_fire_at = @next_fire_at,
    last_fired_at = COALESCE(sqlc.narg(last_fired_at)::timestamptz, last_fired_at),
    updated_at = @now::timestamptz
WHERE organization_id = @organization_id AND name = @name;

-- ScheduleAnyDue returns a row (true) when an active schedule of one of
-- the job types is due at the database clock, and no row otherwise. The
-- worker's scheduler asks it at every poll and opens a firing transaction
-- (FireDue) only when there is a row, so a poll with nothing due costs
-- this one statement, whatever the number of schedules not due: the
-- partial index on due active schedules reads only the due ones. No lock;
-- on Citus every shard answers, in one step (a LIMIT, not EXISTS, which
-- Citus would plan apart).
-- name: ScheduleAnyDue :one
SELECT true AS due
FROM job_schedules
WHERE active
  AND next_fire_at <= now()
  AND job_type = ANY(@job_types::text[])
LIMIT 1;
