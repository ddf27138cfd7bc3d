-- +goose Up
-- One shape for one server and for Citus (distributed PostgreSQL): every
-- tenant table carries organization_id, NOT NULL, with the nil UUID for
-- the global scope (translated at the edge between Go and SQL), and every
-- primary key, unique constraint and foreign key between tenant tables
-- leads with it. On Citus the tenant tables are distributed by it,
-- colocated with job_queue, and job_definitions is a reference table (a
-- copy on every node); elsewhere the Citus calls are skipped.

-- Citus settings, placeholders elsewhere: DDL after multi-shard writes in
-- one transaction must run sequentially, and the triggers (which touch
-- only their row's tenant) are allowed on distributed tables.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
SET LOCAL citus.enable_unsafe_triggers TO on;

-- The global scope becomes the nil UUID.
UPDATE job_queue SET organization_id = '00000000-0000-0000-0000-000000000000' WHERE organization_id IS NULL;
ALTER TABLE job_queue ALTER COLUMN organization_id SET DEFAULT '00000000-0000-0000-0000-000000000000',
    ALTER COLUMN organization_id SET NOT NULL;
UPDATE workflow_runs SET organization_id = '00000000-0000-0000-0000-000000000000' WHERE organization_id IS NULL;
ALTER TABLE workflow_runs ALTER COLUMN organization_id SET DEFAULT '00000000-0000-0000-0000-000000000000',
    ALTER COLUMN organization_id SET NOT NULL;

-- Child tables carry their job's tenant (the default, for rows written by
-- hand, is the global scope; the foreign keys below refuse a mismatch).
ALTER TABLE job_events ADD COLUMN organization_id uuid;
UPDATE job_events e SET organization_id = q.organization_id FROM job_queue q WHERE q.id = e.job_id;
ALTER TABLE job_events ALTER COLUMN organization_id SET DEFAULT '00000000-0000-0000-0000-000000000000',
    ALTER COLUMN organization_id SET NOT NULL;
ALTER TABLE job_replays ADD COLUMN organization_id uuid;
UPDATE job_replays r SET organization_id = q.organization_id FROM job_queue q WHERE q.id = r.source_job_id;
ALTER TABLE job_replays ALTER COLUMN organization_id SET DEFAULT '00000000-0000-0000-0000-000000000000',
    ALTER COLUMN organization_id SET NOT NULL;
ALTER TABLE job_execution_resource_claims ADD COLUMN organization_id uuid;
UPDATE job_execution_resource_claims c SET organization_id = q.organization_id FROM job_queue q WHERE q.id = c.job_id;
ALTER TABLE job_execution_resource_claims ALTER COLUMN organization_id SET DEFAULT '00000000-0000-0000-0000-000000000000',
    ALTER COLUMN organization_id SET NOT NULL;
ALTER TABLE workflow_steps ADD COLUMN organization_id uuid;
UPDATE workflow_steps s SET organization_id = w.organization_id FROM workflow_runs w WHERE w.id = s.workflow_run_id;
ALTER TABLE workflow_steps ALTER COLUMN organization_id SET DEFAULT '00000000-0000-0000-0000-000000000000',
    ALTER COLUMN organization_id SET NOT NULL;

-- Keys led by the tenant. The foreign keys go first (they depend on the
-- old keys) and come back once the tables are distributed.
ALTER TABLE job_events DROP CONSTRAINT fk_job_events_job;
ALTER TABLE job_replays DROP CONSTRAINT fk_job_replays_source_job, DROP CONSTRAINT fk_job_replays_replay_job;
ALTER TABLE job_execution_resource_claims DROP CONSTRAINT fk_job_execution_resource_claims_job;
ALTER TABLE workflow_steps DROP CONSTRAINT fk_workflow_steps_workflow_run, DROP CONSTRAINT fk_workflow_steps_job;

ALTER TABLE job_queue DROP CONSTRAINT job_queue_pkey, ADD CONSTRAINT job_queue_pkey PRIMARY KEY (organization_id, id);
-- The keyed-enqueue indexes keep their names and scopes (an organization's
-- keys, the global scope's keys), now led by the tenant; each statement
-- that reads one names its side in a literal, so that even a generic plan
-- proves the index's predicate.
DROP INDEX uq_job_queue_type_idempotency_global;
DROP INDEX uq_job_queue_type_idempotency_org;
CREATE UNIQUE INDEX uq_job_queue_type_idempotency_org
    ON job_queue (organization_id, job_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id <> '00000000-0000-0000-0000-000000000000';
CREATE UNIQUE INDEX uq_job_queue_type_idempotency_global
    ON job_queue (organization_id, job_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id = '00000000-0000-0000-0000-000000000000';
ALTER TABLE job_events DROP CONSTRAINT job_events_pkey, ADD CONSTRAINT job_events_pkey PRIMARY KEY (organization_id, id);
ALTER TABLE job_replays DROP CONSTRAINT job_replays_pkey, ADD CONSTRAINT job_replays_pkey PRIMARY KEY (organization_id, replay_job_id);
ALTER TABLE job_replays DROP CONSTRAINT uq_job_replays_source_request,
    ADD CONSTRAINT uq_job_replays_source_request UNIQUE (organization_id, source_job_id, source_run_number, replay_request_key);
ALTER TABLE job_execution_resource_claims DROP CONSTRAINT job_execution_resource_claims_pkey,
    ADD CONSTRAINT job_execution_resource_claims_pkey PRIMARY KEY (organization_id, resource_key);
ALTER TABLE job_execution_resource_claims DROP CONSTRAINT job_execution_resource_claims_job_id_key,
    ADD CONSTRAINT job_execution_resource_claims_job_id_key UNIQUE (organization_id, job_id);
ALTER TABLE workflow_runs DROP CONSTRAINT workflow_runs_pkey, ADD CONSTRAINT workflow_runs_pkey PRIMARY KEY (organization_id, id);
ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_pkey, ADD CONSTRAINT workflow_steps_pkey PRIMARY KEY (organization_id, id);
ALTER TABLE workflow_steps DROP CONSTRAINT uq_workflow_steps_run_step_key,
    ADD CONSTRAINT uq_workflow_steps_run_step_key UNIQUE (organization_id, workflow_run_id, step_key);
ALTER TABLE workflow_steps DROP CONSTRAINT uq_workflow_steps_job_id,
    ADD CONSTRAINT uq_workflow_steps_job_id UNIQUE (organization_id, job_id);

-- Distribute, where Citus is installed.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM create_reference_table('job_definitions');
        PERFORM create_distributed_table('job_queue', 'organization_id');
        PERFORM create_distributed_table('job_events', 'organization_id', colocate_with => 'job_queue');
        PERFORM create_distributed_table('job_replays', 'organization_id', colocate_with => 'job_queue');
        PERFORM create_distributed_table('job_execution_resource_claims', 'organization_id', colocate_with => 'job_queue');
        PERFORM create_distributed_table('workflow_runs', 'organization_id', colocate_with => 'job_queue');
        PERFORM create_distributed_table('workflow_steps', 'organization_id', colocate_with => 'job_queue');
    END IF;
END
$$;
-- +goose StatementEnd

-- A job's id, for the paths that know only the id (an unscoped worker
-- call finds the job's tenant first: JobGetTenant). Unique on one server,
-- so a job id is unique across tenants; Citus refuses a unique index
-- without the distribution column, so there ids are unique per tenant,
-- and across tenants as far as UUIDv7 ids are.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        CREATE INDEX idx_job_queue_id ON job_queue (id);
    ELSE
        CREATE UNIQUE INDEX idx_job_queue_id ON job_queue (id);
    END IF;
END
$$;
-- +goose StatementEnd

-- One tenant's PENDING jobs in claim order, for the claim tenant by
-- tenant (JobClaimTenant) that Citus runs; on one server the claim is one
-- statement over every tenant (idx_job_queue_claim) and this index would
-- only cost writes.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        CREATE INDEX idx_job_queue_tenant_claim ON job_queue (organization_id, priority DESC, next_run_at, created_at)
            WHERE status = 'PENDING';
    END IF;
END
$$;
-- +goose StatementEnd

-- The foreign keys, led by the tenant.
ALTER TABLE job_events ADD CONSTRAINT fk_job_events_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE CASCADE;
ALTER TABLE job_replays ADD CONSTRAINT fk_job_replays_source_job FOREIGN KEY (organization_id, source_job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE CASCADE;
ALTER TABLE job_replays ADD CONSTRAINT fk_job_replays_replay_job FOREIGN KEY (organization_id, replay_job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE NO ACTION;
ALTER TABLE job_execution_resource_claims ADD CONSTRAINT fk_job_execution_resource_claims_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE CASCADE;
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_workflow_run FOREIGN KEY (organization_id, workflow_run_id)
    REFERENCES workflow_runs (organization_id, id) ON DELETE CASCADE;
-- Citus refuses ON DELETE SET NULL on a key that includes the
-- distribution column (and SET NULL would null the tenant too): NO ACTION,
-- and a trigger unlinks the step before its job is deleted.
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE NO ACTION;

-- +goose StatementBegin
CREATE FUNCTION unlink_workflow_step_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workflow_steps SET job_id = NULL
    WHERE organization_id = OLD.organization_id AND job_id = OLD.id;
    RETURN OLD;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER trg_job_queue_unlink_workflow_step
    BEFORE DELETE ON job_queue
    FOR EACH ROW EXECUTE FUNCTION unlink_workflow_step_job();

-- The resource triggers address their row's tenant only (on Citus a
-- trigger runs on the shard and may touch only colocated rows).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_job_execution_resource_claim_on_lease() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
    FROM job_execution_resource_claims c
    WHERE c.organization_id = NEW.organization_id
      AND c.resource_key = NEW.execution_resource_key
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION release_job_execution_resource_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> 'LEASED'
       OR NEW.run_number <> OLD.run_number
       OR NEW.attempt <> OLD.attempt
       OR NEW.worker_id IS DISTINCT FROM OLD.worker_id THEN
        IF NEW.status = 'CANCELED' AND OLD.lease_expires_at > clock_timestamp() THEN
            UPDATE job_execution_resource_claims
            SET release_after = OLD.lease_expires_at
            WHERE organization_id = OLD.organization_id AND job_id = OLD.id AND run_number = OLD.run_number
              AND attempt = OLD.attempt AND worker_id = OLD.worker_id;
        ELSE
            DELETE FROM job_execution_resource_claims
            WHERE organization_id = OLD.organization_id AND job_id = OLD.id AND run_number = OLD.run_number
              AND attempt = OLD.attempt AND worker_id = OLD.worker_id;
        END IF;
    ELSIF NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN
        UPDATE job_execution_resource_claims
        SET lease_expires_at = NEW.lease_expires_at
        WHERE organization_id = NEW.organization_id AND job_id = NEW.id AND run_number = NEW.run_number
          AND attempt = NEW.attempt AND worker_id = NEW.worker_id;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- Rows copied into the shards stay behind in the coordinator's own tables
-- unless truncated there.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM truncate_local_data_after_distributing_table(t)
        FROM unnest(ARRAY['job_events', 'job_replays', 'job_execution_resource_claims', 'workflow_steps',
                          'workflow_runs', 'job_queue', 'job_definitions']::regclass[]) AS t;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
SET LOCAL citus.enable_unsafe_triggers TO on;

-- On Citus the tables go back to the coordinator first. Citus cannot
-- undistribute a table with an identity column, so job_events is copied
-- out, dropped and recreated (its identity carried over).
-- +goose StatementBegin
DO $$
DECLARE
    next_event bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        CREATE TEMP TABLE job_events_down ON COMMIT DROP AS SELECT * FROM job_events;
        SELECT coalesce(max(id), 0) + 1 INTO next_event FROM job_events_down;
        DROP TABLE job_events;
        PERFORM undistribute_table('job_queue', cascade_via_foreign_keys => true);
        IF EXISTS (SELECT 1 FROM citus_tables WHERE table_name = 'job_definitions'::regclass) THEN
            PERFORM undistribute_table('job_definitions', cascade_via_foreign_keys => true);
        END IF;
        CREATE TABLE job_events (
            id             bigint         GENERATED ALWAYS AS IDENTITY,
            job_id         uuid           NOT NULL,
            run_number     integer        NOT NULL DEFAULT 1,
            attempt        integer,
            event_type     job_event_type NOT NULL,
            stage          text,
            progress_done  bigint,
            progress_total bigint,
            payload        jsonb          NOT NULL DEFAULT '{}'::jsonb,
            occurred_at    timestamptz    NOT NULL DEFAULT now(),
            organization_id uuid          NOT NULL,
            CONSTRAINT job_events_pkey PRIMARY KEY (organization_id, id),
            CONSTRAINT chk_job_events_attempt_nonnegative CHECK (attempt IS NULL OR attempt > 0),
            CONSTRAINT chk_job_events_run_number_positive CHECK (run_number > 0),
            CONSTRAINT chk_job_events_stage_not_blank CHECK (stage IS NULL OR length(trim(stage)) > 0),
            CONSTRAINT chk_job_events_progress_nonnegative CHECK (
                (progress_done IS NULL OR progress_done >= 0)
                AND (progress_total IS NULL OR progress_total >= 0)
                AND (progress_done IS NULL OR progress_total IS NULL OR progress_done <= progress_total)
            )
        );
        INSERT INTO job_events OVERRIDING SYSTEM VALUE SELECT * FROM job_events_down;
        EXECUTE format('ALTER TABLE job_events ALTER COLUMN id RESTART WITH %s', next_event);
        CREATE INDEX idx_job_events_job_run_id ON job_events (job_id, run_number, id);
        CREATE INDEX idx_job_events_type_time ON job_events (event_type, occurred_at DESC);
        CREATE INDEX idx_job_events_job_id_newest ON job_events (job_id, id DESC);
        ALTER TABLE job_events ADD CONSTRAINT fk_job_events_job FOREIGN KEY (organization_id, job_id)
            REFERENCES job_queue (organization_id, id) ON DELETE CASCADE;
    END IF;
END
$$;
-- +goose StatementEnd

DROP TRIGGER trg_job_queue_unlink_workflow_step ON job_queue;
DROP FUNCTION unlink_workflow_step_job();

ALTER TABLE job_events DROP CONSTRAINT fk_job_events_job;
ALTER TABLE job_replays DROP CONSTRAINT fk_job_replays_source_job, DROP CONSTRAINT fk_job_replays_replay_job;
ALTER TABLE job_execution_resource_claims DROP CONSTRAINT fk_job_execution_resource_claims_job;
ALTER TABLE workflow_steps DROP CONSTRAINT fk_workflow_steps_workflow_run, DROP CONSTRAINT fk_workflow_steps_job;

DROP INDEX idx_job_queue_id;
DROP INDEX IF EXISTS idx_job_queue_tenant_claim;
ALTER TABLE job_queue DROP CONSTRAINT job_queue_pkey, ADD CONSTRAINT job_queue_pkey PRIMARY KEY (id);
DROP INDEX uq_job_queue_type_idempotency_org;
DROP INDEX uq_job_queue_type_idempotency_global;
ALTER TABLE job_events DROP CONSTRAINT job_events_pkey, ADD CONSTRAINT job_events_pkey PRIMARY KEY (id);
ALTER TABLE job_replays DROP CONSTRAINT job_replays_pkey, ADD CONSTRAINT job_replays_pkey PRIMARY KEY (replay_job_id);
ALTER TABLE job_replays DROP CONSTRAINT uq_job_replays_source_request,
    ADD CONSTRAINT uq_job_replays_source_request UNIQUE (source_job_id, source_run_number, replay_request_key);
ALTER TABLE job_execution_resource_claims DROP CONSTRAINT job_execution_resource_claims_pkey,
    ADD CONSTRAINT job_execution_resource_claims_pkey PRIMARY KEY (resource_key);
ALTER TABLE job_execution_resource_claims DROP CONSTRAINT job_execution_resource_claims_job_id_key,
    ADD CONSTRAINT job_execution_resource_claims_job_id_key UNIQUE (job_id);
ALTER TABLE workflow_runs DROP CONSTRAINT workflow_runs_pkey, ADD CONSTRAINT workflow_runs_pkey PRIMARY KEY (id);
ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_pkey, ADD CONSTRAINT workflow_steps_pkey PRIMARY KEY (id);
ALTER TABLE workflow_steps DROP CONSTRAINT uq_workflow_steps_run_step_key,
    ADD CONSTRAINT uq_workflow_steps_run_step_key UNIQUE (workflow_run_id, step_key);
ALTER TABLE workflow_steps DROP CONSTRAINT uq_workflow_steps_job_id,
    ADD CONSTRAINT uq_workflow_steps_job_id UNIQUE (job_id);

ALTER TABLE job_events DROP COLUMN organization_id;
ALTER TABLE job_replays DROP COLUMN organization_id;
ALTER TABLE job_execution_resource_claims DROP COLUMN organization_id;
ALTER TABLE workflow_steps DROP COLUMN organization_id;

ALTER TABLE job_queue ALTER COLUMN organization_id DROP NOT NULL, ALTER COLUMN organization_id DROP DEFAULT;
UPDATE job_queue SET organization_id = NULL WHERE organization_id = '00000000-0000-0000-0000-000000000000';
ALTER TABLE workflow_runs ALTER COLUMN organization_id DROP NOT NULL, ALTER COLUMN organization_id DROP DEFAULT;
UPDATE workflow_runs SET organization_id = NULL WHERE organization_id = '00000000-0000-0000-0000-000000000000';

CREATE UNIQUE INDEX uq_job_queue_type_idempotency_org
    ON job_queue (job_type, organization_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL;
CREATE UNIQUE INDEX uq_job_queue_type_idempotency_global
    ON job_queue (job_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id IS NULL;

ALTER TABLE job_events ADD CONSTRAINT fk_job_events_job FOREIGN KEY (job_id)
    REFERENCES job_queue (id) ON DELETE CASCADE;
ALTER TABLE job_replays ADD CONSTRAINT fk_job_replays_source_job FOREIGN KEY (source_job_id)
    REFERENCES job_queue (id) ON DELETE CASCADE;
ALTER TABLE job_replays ADD CONSTRAINT fk_job_replays_replay_job FOREIGN KEY (replay_job_id)
    REFERENCES job_queue (id) ON DELETE NO ACTION;
ALTER TABLE job_execution_resource_claims ADD CONSTRAINT fk_job_execution_resource_claims_job FOREIGN KEY (job_id)
    REFERENCES job_queue (id) ON DELETE CASCADE;
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_workflow_run FOREIGN KEY (workflow_run_id)
    REFERENCES workflow_runs (id) ON DELETE CASCADE;
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_job FOREIGN KEY (job_id)
    REFERENCES job_queue (id) ON DELETE SET NULL;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_job_execution_resource_claim_on_lease() RETURNS trigger
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION release_job_execution_resource_claim() RETURNS trigger
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
