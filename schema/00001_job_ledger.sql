-- +goose Up
-- The job ledger: definitions, the queue and its event history.

-- +goose StatementBegin
CREATE FUNCTION set_updated_at_timestamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TYPE job_status AS ENUM (
    'PENDING', 'LEASED', 'SUCCEEDED', 'DEAD_LETTERED', 'CANCELED'
);

CREATE TYPE job_event_type AS ENUM (
    'ENQUEUED', 'LEASED', 'HEARTBEAT', 'STAGE_CHANGED', 'PROGRESS',
    'RETRY_SCHEDULED', 'SUCCEEDED', 'FAILED', 'DEAD_LETTERED', 'CANCELED',
    'REQUEUED'
);

CREATE TYPE job_failure_kind AS ENUM (
    'RETRYABLE', 'TERMINAL', 'PANICKED', 'TIMEOUT', 'LEASE_EXPIRED'
);

CREATE TABLE job_definitions (
    job_type                text        PRIMARY KEY,
    version                 integer     NOT NULL DEFAULT 1,
    max_attempts            integer     NOT NULL DEFAULT 8,
    default_timeout_seconds integer     NOT NULL DEFAULT 900,
    default_priority        integer     NOT NULL DEFAULT 100,
    is_enabled              boolean     NOT NULL DEFAULT true,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT chk_job_definitions_type_not_blank CHECK (length(trim(job_type)) > 0),
    CONSTRAINT chk_job_definitions_version_positive CHECK (version > 0),
    CONSTRAINT chk_job_definitions_max_attempts_positive CHECK (max_attempts > 0),
    CONSTRAINT chk_job_definitions_timeout_positive CHECK (default_timeout_seconds > 0)
);

CREATE TRIGGER trg_job_definitions_set_updated_at
    BEFORE UPDATE ON job_definitions
    FOR EACH ROW EXECUTE FUNCTION set_updated_at_timestamp();

-- Ids are UUIDv7 chosen by the application; the default only serves rows
-- inserted by hand (gen_random_uuid is built in from PostgreSQL 13).
CREATE TABLE job_queue (
    id                 uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    job_type           text        NOT NULL,
    organization_id    uuid,
    payload            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status             job_status  NOT NULL DEFAULT 'PENDING',
    priority           integer     NOT NULL DEFAULT 100,
    run_number         integer     NOT NULL DEFAULT 1,
    attempt            integer     NOT NULL DEFAULT 0,
    max_attempts       integer     NOT NULL,
    timeout_seconds    integer     NOT NULL DEFAULT 900,
    next_run_at        timestamptz NOT NULL DEFAULT now(),
    lease_expires_at   timestamptz,
    last_heartbeat_at  timestamptz,
    worker_id          text,
    started_at         timestamptz,
    finished_at        timestamptz,
    stage              text        NOT NULL DEFAULT 'queued',
    progress_done      bigint,
    progress_total     bigint,
    progress_pct       numeric GENERATED ALWAYS AS (
        CASE
            WHEN progress_done IS NULL OR progress_total IS NULL OR progress_total <= 0 THEN NULL
            ELSE round(progress_done::numeric * 100.0 / progress_total::numeric, 2)
        END
    ) STORED,
    checkpoint         jsonb,
    idempotency_key    text,
    status_reason      text,
    last_error_code    text,
    last_error_message text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- Canonical snapshot of a keyed enqueue, compared on a repeated request.
    enqueue_request    jsonb,
    output             jsonb,
    CONSTRAINT fk_job_queue_job_type FOREIGN KEY (job_type)
        REFERENCES job_definitions (job_type) ON DELETE RESTRICT,
    CONSTRAINT chk_job_queue_attempt_nonnegative CHECK (attempt >= 0),
    CONSTRAINT chk_job_queue_max_attempts_positive CHECK (max_attempts > 0),
    CONSTRAINT chk_job_queue_run_number_positive CHECK (run_number > 0),
    CONSTRAINT chk_job_queue_timeout_positive CHECK (timeout_seconds > 0),
    CONSTRAINT chk_job_queue_progress_nonnegative CHECK (
        (progress_done IS NULL OR progress_done >= 0)
        AND (progress_total IS NULL OR progress_total >= 0)
        AND (progress_done IS NULL OR progress_total IS NULL OR progress_done <= progress_total)
    ),
    CONSTRAINT chk_job_queue_stage_not_blank CHECK (length(trim(stage)) > 0),
    CONSTRAINT chk_job_queue_worker_id_not_blank
        CHECK (worker_id IS NULL OR length(trim(worker_id)) > 0),
    CONSTRAINT chk_job_queue_idempotency_key_not_blank
        CHECK (idempotency_key IS NULL OR length(trim(idempotency_key)) > 0),
    -- Every keyed job keeps the request it was created from, so a repeated
    -- keyed enqueue can be told apart from a conflicting one.
    CONSTRAINT ck_job_queue_idempotency_enqueue_request
        CHECK (idempotency_key IS NULL OR enqueue_request IS NOT NULL)
);

CREATE TRIGGER trg_job_queue_set_updated_at
    BEFORE UPDATE ON job_queue
    FOR EACH ROW EXECUTE FUNCTION set_updated_at_timestamp();

-- Keyed enqueue: one job per (type, scope, key). Two partial indexes because
-- a NULL organization never compares equal inside a unique index.
CREATE UNIQUE INDEX uq_job_queue_type_idempotency_org
    ON job_queue (job_type, organization_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL;
CREATE UNIQUE INDEX uq_job_queue_type_idempotency_global
    ON job_queue (job_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id IS NULL;

-- Claim order over due pending jobs (JobLockForClaim).
CREATE INDEX idx_job_queue_claim
    ON job_queue (status, priority DESC, next_run_at, created_at)
    WHERE status = 'PENDING';

-- Leases that ran out (JobRecoverExpiredLeases).
CREATE INDEX idx_job_queue_leased_expiry
    ON job_queue (lease_expires_at)
    WHERE status = 'LEASED';

-- Status listings within one scope (JobListByStatusOrg, JobListByStatusGlobal).
CREATE INDEX idx_job_queue_org_status_created
    ON job_queue (organization_id, status, created_at DESC);

-- Status listings per job type (JobListByTypeAndStatus).
CREATE INDEX idx_job_queue_type_status_created
    ON job_queue (job_type, status, created_at DESC);

-- Newest-first pages within one scope (JobListPageGlobal, JobListPageOrg)
-- and across all scopes (JobListPageAll); the id breaks ties so keyset
-- cursors are exact.
CREATE INDEX idx_job_queue_scope_created_id
    ON job_queue (organization_id, created_at DESC, id DESC);
CREATE INDEX idx_job_queue_created_id
    ON job_queue (created_at DESC, id DESC);

CREATE TABLE job_events (
    id             bigint         GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         uuid           NOT NULL,
    run_number     integer        NOT NULL DEFAULT 1,
    attempt        integer,
    event_type     job_event_type NOT NULL,
    stage          text,
    progress_done  bigint,
    progress_total bigint,
    payload        jsonb          NOT NULL DEFAULT '{}'::jsonb,
    occurred_at    timestamptz    NOT NULL DEFAULT now(),
    CONSTRAINT fk_job_events_job FOREIGN KEY (job_id)
        REFERENCES job_queue (id) ON DELETE CASCADE,
    CONSTRAINT chk_job_events_attempt_nonnegative CHECK (attempt IS NULL OR attempt > 0),
    CONSTRAINT chk_job_events_run_number_positive CHECK (run_number > 0),
    CONSTRAINT chk_job_events_stage_not_blank CHECK (stage IS NULL OR length(trim(stage)) > 0),
    CONSTRAINT chk_job_events_progress_nonnegative CHECK (
        (progress_done IS NULL OR progress_done >= 0)
        AND (progress_total IS NULL OR progress_total >= 0)
        AND (progress_done IS NULL OR progress_total IS NULL OR progress_done <= progress_total)
    )
);

-- A job's history in run order (JobEventListForJob); also serves the
-- foreign key's cascade.
CREATE INDEX idx_job_events_job_run_id ON job_events (job_id, run_number, id);
-- Recent events of one type (JobEventListRecentByType).
CREATE INDEX idx_job_events_type_time ON job_events (event_type, occurred_at DESC);
-- A job's newest events first (JobEventListNewestForJob).
CREATE INDEX idx_job_events_job_id_newest ON job_events (job_id, id DESC);

-- +goose Down
DROP TABLE job_events;
DROP TABLE job_queue;
DROP TABLE job_definitions;
DROP TYPE job_failure_kind;
DROP TYPE job_event_type;
DROP TYPE job_status;
DROP FUNCTION set_updated_at_timestamp();
