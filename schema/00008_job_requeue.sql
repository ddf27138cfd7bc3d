-- +goose Up
-- Compare-and-requeue by filter: the DEAD_LETTERED and CANCELED jobs of one
-- tenant and status, in finish order, a page at a time
-- (JobListFinishedForRequeue and the count beside it). Partial, so it holds
-- only the two requeueable statuses; the id breaks ties between equal
-- finish times so keyset pages are exact; the job type and error code ride
-- along for the filter's optional conditions.
CREATE INDEX idx_job_queue_requeueable_scope_finished
    ON job_queue (organization_id, status, finished_at, id)
    INCLUDE (job_type, last_error_code)
    WHERE status IN ('DEAD_LETTERED', 'CANCELED');

-- +goose Down
DROP INDEX idx_job_queue_requeueable_scope_finished;
