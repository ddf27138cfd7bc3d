-- +goose Up
-- Bulk replay by filter: the succeeded jobs of one type and scope, in
-- finish order, a page at a time (JobListSucceededForReplayGlobal/Org and
-- the counts beside them). Partial, so it holds only SUCCEEDED jobs; the id
-- breaks ties between equal finish times so keyset pages are exact.
CREATE INDEX idx_job_queue_succeeded_type_scope_finished
    ON job_queue (job_type, organization_id, finished_at, id)
    WHERE status = 'SUCCEEDED';

-- +goose Down
DROP INDEX idx_job_queue_succeeded_type_scope_finished;
