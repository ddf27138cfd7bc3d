-- +goose Up
-- The index diet of the hot path (CONTRACT 2a): every index left on
-- job_queue and job_events serves a statement in queries/ that the plan
-- audit checks, and none serves a listing another index already serves.
-- Each index dropped here was one more entry written by every enqueue and
-- every status change of every job.
--
-- Status listings of one tenant (JobListByStatus) and of one type
-- (JobListByTypeAndStatus) are served by the indexes of the live queue
-- (idx_job_queue_live_type), of finished jobs (idx_job_queue_scope_finished,
-- idx_job_queue_finished, idx_job_queue_succeeded_type_scope_finished) and
-- of creation order (idx_job_queue_scope_created_id, idx_job_queue_created_id).
-- Being full indexes led by a column that changes at every transition, these
-- two were rewritten by every claim and completion.
DROP INDEX idx_job_queue_org_status_created;
DROP INDEX idx_job_queue_type_status_created;

-- A job's newest events (JobEventListNewestForJob) are a range of
-- idx_job_events_job_run_id, which holds the same rows with the same job
-- id first.
DROP INDEX idx_job_events_job_id_newest;

-- Events keep no foreign key to their job: the statement that writes a
-- transition writes its event, and the prune (JobPruneDelete) deletes a
-- job's events in the statement that deletes the job. The key cost every
-- event insert a lookup of its job, and every deleted job a cascade read of
-- job_events whose plan followed the statistics of the tenant.
ALTER TABLE job_events DROP CONSTRAINT fk_job_events_job;

-- +goose Down
-- Restores the key (refused while an event has no job: delete such
-- events first) and the three indexes; each index is a full build.
ALTER TABLE job_events ADD CONSTRAINT fk_job_events_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE CASCADE;
CREATE INDEX idx_job_events_job_id_newest ON job_events (job_id, id DESC);
CREATE INDEX idx_job_queue_type_status_created
    ON job_queue (job_type, status, created_at DESC);
CREATE INDEX idx_job_queue_org_status_created
    ON job_queue (organization_id, status, created_at DESC);
