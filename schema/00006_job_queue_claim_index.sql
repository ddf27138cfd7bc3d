-- +goose Up
-- The claim index without status as its leading column: in an index that
-- holds only PENDING jobs the column is always equal, and where a plan
-- drops the condition on it (the partial index implies it) the priority
-- and due-time bounds could not start a range. Led by the priority, each
-- priority's due jobs are a range (JobClaim) and the next lower priority is
-- one descent, so jobs scheduled for later are never read.
DROP INDEX idx_job_queue_claim;
CREATE INDEX idx_job_queue_claim
    ON job_queue (priority DESC, next_run_at, created_at)
    WHERE status = 'PENDING';

-- +goose Down
DROP INDEX idx_job_queue_claim;
CREATE INDEX idx_job_queue_claim
    ON job_queue (status, priority DESC, next_run_at, created_at)
    WHERE status = 'PENDING';
