-- JobDefinitionUpsert creates a job type or changes its settings. A NULL
-- argument keeps the stored value (on insert: the column default, 8
-- attempts, 900 seconds, priority 100, enabled). The version goes up by one
-- whenever a setting actually changes. Updating waits for transactions that
-- hold the row FOR SHARE (enqueues and replays of this type in flight).
-- name: JobDefinitionUpsert :one
INSERT INTO job_definitions AS d (
    job_type, max_attempts, default_timeout_seconds, default_priority, is_enabled
)
VALUES (
    @job_type,
    COALESCE(sqlc.narg(max_attempts)::int, 8),
    COALESCE(sqlc.narg(default_timeout_seconds)::int, 900),
    COALESCE(sqlc.narg(default_priority)::int, 100),
    COALESCE(sqlc.narg(is_enabled)::bool, true)
)
ON CONFLICT (job_type) DO UPDATE SET
    max_attempts = COALESCE(sqlc.narg(max_attempts)::int, d.max_attempts),
    default_timeout_seconds = COALESCE(sqlc.narg(default_timeout_seconds)::int, d.default_timeout_seconds),
    default_priority = COALESCE(sqlc.narg(default_priority)::int, d.default_priority),
    is_enabled = COALESCE(sqlc.narg(is_enabled)::bool, d.is_enabled),
    version = d.version + CASE
        WHEN (d.max_attempts, d.default_timeout_seconds, d.default_priority, d.is_enabled)
             IS DISTINCT FROM (
                 COALESCE(sqlc.narg(max_attempts)::int, d.max_attempts),
                 COALESCE(sqlc.narg(default_timeout_seconds)::int, d.default_timeout_seconds),
                 COALESCE(sqlc.narg(default_priority)::int, d.default_priority),
                 COALESCE(sqlc.narg(is_enabled)::bool, d.is_enabled))
        THEN 1 ELSE 0 END
RETURNING *;

-- JobDefinitionGetByJobType reads one job type's definition. No lock.
-- name: JobDefinitionGetByJobType :one
SELECT * FROM job_definitions WHERE job_type = @job_type;

-- JobDefinitionList lists every job type, by name. No lock.
-- name: JobDefinitionList :many
SELECT * FROM job_definitions ORDER BY job_type;

-- JobDefinitionSetPaused pauses or resumes one job type (flow control):
-- while is_paused, claims lease none of its jobs. The version is not a
-- setting's and stays; updated_at moves (trigger). No row when the type
-- has no definition. Waits for transactions that hold the row FOR SHARE.
-- name: JobDefinitionSetPaused :one
UPDATE job_definitions SET is_paused = @is_paused WHERE job_type = @job_type
RETURNING *;
