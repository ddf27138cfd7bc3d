-- +goose Up
-- Execution resources: jobs sharing a resource key never run at the same
-- time. A leased job with a key must hold the key's claim row.

ALTER TABLE job_queue ADD COLUMN execution_resource_key text;

-- A key holds at least one non-white-space character (the Unicode spaces
-- that [:space:] misses are listed) and at most 512 bytes.
ALTER TABLE job_queue ADD CONSTRAINT chk_job_queue_execution_resource_key CHECK (
    execution_resource_key IS NULL
    OR (
        execution_resource_key ~ U&'[^[:space:]\00A0\0085\1680\2000-\200A\2028\2029\202F\205F\3000]'
        AND octet_length(execution_resource_key) <= 512
    )
);

-- Claim order over pending jobs that need a resource (JobLockForClaim
-- when a key is involved); INCLUDE lets the key check skip the heap.
CREATE INDEX idx_job_queue_execution_resource_claim_order
    ON job_queue (priority DESC, next_run_at, created_at, id)
    INCLUDE (execution_resource_key, job_type)
    WHERE status = 'PENDING' AND execution_resource_key IS NOT NULL;

CREATE TABLE job_execution_resource_claims (
    resource_key     text        PRIMARY KEY,
    job_id           uuid        NOT NULL UNIQUE,
    run_number       integer     NOT NULL,
    attempt          integer     NOT NULL,
    worker_id        text        NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    -- Set when a job is canceled while its lease is still live: the claim is
    -- kept until the lease would have run out, so a still-running worker
    -- never overlaps the next holder.
    release_after    timestamptz,
    acquired_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT fk_job_execution_resource_claims_job FOREIGN KEY (job_id)
        REFERENCES job_queue (id) ON DELETE CASCADE,
    CONSTRAINT chk_job_execution_resource_claims_resource_key CHECK (
        resource_key ~ U&'[^[:space:]\00A0\0085\1680\2000-\200A\2028\2029\202F\205F\3000]'
        AND octet_length(resource_key) <= 512
    ),
    CONSTRAINT chk_job_execution_resource_claims_run_number CHECK (run_number > 0),
    CONSTRAINT chk_job_execution_resource_claims_attempt CHECK (attempt > 0),
    CONSTRAINT chk_job_execution_resource_claims_worker_id CHECK (
        worker_id ~ U&'[^[:space:]\00A0\0085\1680\2000-\200A\2028\2029\202F\205F\3000]'
    )
);

-- Claims whose delayed release is due (JobResourceClaimDeleteReleased).
CREATE INDEX idx_job_execution_resource_claims_release_after
    ON job_execution_resource_claims (release_after)
    WHERE release_after IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION enforce_job_execution_resource_claim_on_lease() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
    FROM job_execution_resource_claims c
    WHERE c.resource_key = NEW.execution_resource_key
      AND c.job_id = NEW.id
      AND c.run_number = NEW.run_number
      AND c.attempt = NEW.attempt
      AND c.worker_id = NEW.worker_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a leased job with an execution resource key needs its claim'
            USING ERRCODE = '23514',
                  CONSTRAINT = 'chk_job_queue_execution_resource_claim_required';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER trg_job_queue_enforce_execution_resource_claim
    BEFORE UPDATE OF status ON job_queue
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status = 'LEASED'
          AND NEW.execution_resource_key IS NOT NULL)
    EXECUTE FUNCTION enforce_job_execution_resource_claim_on_lease();

-- When a leased job with a key leaves its lease, its claim goes with it;
-- a cancel during a live lease defers the release to the lease's end; a
-- renewed lease carries its new expiry to the claim.
-- +goose StatementBegin
CREATE FUNCTION release_job_execution_resource_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> 'LEASED'
       OR NEW.run_number <> OLD.run_number
       OR NEW.attempt <> OLD.attempt
       OR NEW.worker_id IS DISTINCT FROM OLD.worker_id THEN
        IF NEW.status = 'CANCELED' AND OLD.lease_expires_at > clock_timestamp() THEN
            UPDATE job_execution_resource_claims
            SET release_after = OLD.lease_expires_at
            WHERE job_id = OLD.id AND run_number = OLD.run_number
              AND attempt = OLD.attempt AND worker_id = OLD.worker_id;
        ELSE
            DELETE FROM job_execution_resource_claims
            WHERE job_id = OLD.id AND run_number = OLD.run_number
              AND attempt = OLD.attempt AND worker_id = OLD.worker_id;
        END IF;
    ELSIF NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN
        UPDATE job_execution_resource_claims
        SET lease_expires_at = NEW.lease_expires_at
        WHERE job_id = NEW.id AND run_number = NEW.run_number
          AND attempt = NEW.attempt AND worker_id = NEW.worker_id;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER trg_job_queue_release_execution_resource
    AFTER UPDATE OF status, run_number, attempt, worker_id, lease_expires_at ON job_queue
    FOR EACH ROW
    WHEN (OLD.status = 'LEASED' AND OLD.execution_resource_key IS NOT NULL)
    EXECUTE FUNCTION release_job_execution_resource_claim();

-- +goose Down
DROP TRIGGER trg_job_queue_release_execution_resource ON job_queue;
DROP TRIGGER trg_job_queue_enforce_execution_resource_claim ON job_queue;
DROP FUNCTION release_job_execution_resource_claim();
DROP FUNCTION enforce_job_execution_resource_claim_on_lease();
DROP TABLE job_execution_resource_claims;
DROP INDEX idx_job_queue_execution_resource_claim_order;
ALTER TABLE job_queue DROP CONSTRAINT chk_job_queue_execution_resource_key;
ALTER TABLE job_queue DROP COLUMN execution_resource_key;
