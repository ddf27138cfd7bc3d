-- +goose Up
-- Only what workflow membership needs: a step may own one job, and a job
-- owned by a step is workflow-managed (replay refuses it).

CREATE TYPE workflow_step_execution_kind AS ENUM ('JOB', 'EXTERNAL');

CREATE TABLE workflow_runs (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workflow_type   text        NOT NULL,
    organization_id uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT chk_workflow_runs_workflow_type_not_blank
        CHECK (length(trim(workflow_type)) > 0)
);

CREATE TRIGGER trg_workflow_runs_set_updated_at
    BEFORE UPDATE ON workflow_runs
    FOR EACH ROW EXECUTE FUNCTION set_updated_at_timestamp();

CREATE TABLE workflow_steps (
    id              uuid                         PRIMARY KEY DEFAULT gen_random_uuid(),
    workflow_run_id uuid                         NOT NULL,
    step_key        text                         NOT NULL,
    execution_kind  workflow_step_execution_kind NOT NULL DEFAULT 'JOB',
    -- The only record of the step/job link.
    job_id          uuid,
    created_at      timestamptz                  NOT NULL DEFAULT now(),
    updated_at      timestamptz                  NOT NULL DEFAULT now(),
    CONSTRAINT fk_workflow_steps_workflow_run FOREIGN KEY (workflow_run_id)
        REFERENCES workflow_runs (id) ON DELETE CASCADE,
    CONSTRAINT fk_workflow_steps_job FOREIGN KEY (job_id)
        REFERENCES job_queue (id) ON DELETE SET NULL,
    CONSTRAINT uq_workflow_steps_run_step_key UNIQUE (workflow_run_id, step_key),
    -- Also makes the "is this job workflow-managed?" probe an index lookup.
    CONSTRAINT uq_workflow_steps_job_id UNIQUE (job_id),
    CONSTRAINT chk_workflow_steps_step_key_not_blank CHECK (length(trim(step_key)) > 0),
    CONSTRAINT chk_workflow_steps_execution_shape
        CHECK (execution_kind = 'JOB' OR job_id IS NULL)
);

CREATE TRIGGER trg_workflow_steps_set_updated_at
    BEFORE UPDATE ON workflow_steps
    FOR EACH ROW EXECUTE FUNCTION set_updated_at_timestamp();

-- +goose Down
DROP TABLE workflow_steps;
DROP TABLE workflow_runs;
DROP TYPE workflow_step_execution_kind;
