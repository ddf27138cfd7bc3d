-- JobEventListForJob returns a job's events in the order they happened
-- (run, then id), only when the job is in the caller's tenant. No lock.
-- name: JobEventListForJob :many
SELECT sqlc.embed(job_events)
FROM job_events
WHERE job_events.organization_id = @organization_id
  AND job_events.job_id = @job_id
ORDER BY job_events.run_number, job_events.id;

-- JobEventListNewestForJob returns a job's newest @max_events events, newest
-- first, only when the job is in the caller's tenant; with @before_event_id set,
-- only events older than that one (the next page back). No lock.
-- name: JobEventListNewestForJob :many
SELECT sqlc.embed(job_events)
FROM job_events
WHERE job_events.organization_id = @organization_id
  AND job_events.job_id = @job_id
  AND job_events.id < coalesce(sqlc.narg(before_event_id)::bigint, 9223372036854775807)
ORDER BY job_events.id DESC
LIMIT @max_events;

-- JobEventListRecentByType returns the newest events of one type since a
-- time, across tenants (operators only; on Citus every shard). No lock.
-- name: JobEventListRecentByType :many
SELECT * FROM job_events
WHERE event_type = @event_type
  AND occurred_at >= @since
ORDER BY occurred_at DESC
LIMIT @max_events;
