-- +goose Up
-- Queue health and retention. Each index is partial, so its size follows
-- what it serves, never the whole history.

-- The live queue per tenant and job type (JobStatsTenant, JobStatsAll):
-- PENDING and LEASED jobs only, with what the counts and the oldest due
-- age read, so the stats read the index alone.
CREATE INDEX idx_job_queue_live_type
    ON job_queue (organization_id, job_type, status, next_run_at)
    INCLUDE (lease_expires_at)
    WHERE status IN ('PENDING', 'LEASED');

-- Finished jobs in finish order across tenants: the stats window
-- (JobStatsAll) and the tenants that hold jobs to prune
-- (JobPruneListTenants). The id makes the order total.
CREATE INDEX idx_job_queue_finished
    ON job_queue (finished_at, id)
    INCLUDE (organization_id, job_type, status, started_at)
    WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED');

-- Finished jobs of one tenant in finish order: the stats window
-- (JobStatsTenant) and the keyset batches of a prune
-- (JobPruneLockBatch).
CREATE INDEX idx_job_queue_scope_finished
    ON job_queue (organization_id, finished_at, id)
    INCLUDE (job_type, status, started_at)
    WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED');

-- +goose Down
DROP INDEX idx_job_queue_scope_finished;
DROP INDEX idx_job_queue_finished;
DROP INDEX idx_job_queue_live_type;
