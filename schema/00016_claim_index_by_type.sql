-- +goose Up
-- The claim indexes led by the job type. A worker claims only the types
-- it has handlers for; led by the priority, the index held every type's
-- pending jobs in one claim order, so a claim of one type read through
-- the pending jobs of every other type that came before its own (1,000
-- due jobs of one type behind 100,000 of another: a claim of 100 read the
-- whole backlog). Led by the type, each claimed type's due jobs of a
-- priority are a range of their own (JobClaim), whatever the other types
-- hold. Each index has the same entries as before: the claim's cost in
-- writes is unchanged.
DROP INDEX idx_job_queue_claim;
CREATE INDEX idx_job_queue_claim
    ON job_queue (job_type, priority DESC, next_run_at, created_at)
    WHERE status = 'PENDING';

-- On Citus, the tenant's claim (JobClaimTenant), type by type likewise.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        DROP INDEX idx_job_queue_tenant_claim;
        CREATE INDEX idx_job_queue_tenant_claim ON job_queue (organization_id, job_type, priority DESC, next_run_at, created_at)
            WHERE status = 'PENDING';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        DROP INDEX idx_job_queue_tenant_claim;
        CREATE INDEX idx_job_queue_tenant_claim ON job_queue (organization_id, priority DESC, next_run_at, created_at)
            WHERE status = 'PENDING';
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX idx_job_queue_claim;
CREATE INDEX idx_job_queue_claim
    ON job_queue (priority DESC, next_run_at, created_at)
    WHERE status = 'PENDING';
