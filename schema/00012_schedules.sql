-- +goose Up
-- Schedules: named cron schedules that enqueue a job of their type at each
-- tick. A tenant table like the others (organization_id NOT NULL, the nil
-- UUID for the global scope, every key led by it; on Citus distributed by
-- it, colocated with job_queue). next_fire_at is the cursor: the first
-- tick not yet handled; a firer claims due rows (next_fire_at at or
-- before the database clock) FOR UPDATE SKIP LOCKED, enqueues, and moves
-- the cursor in one transaction.
CREATE TABLE job_schedules (
    organization_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    name text NOT NULL,
    cron text NOT NULL,
    tz text NOT NULL DEFAULT 'UTC',
    job_type text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority integer,
    jitter_seconds integer NOT NULL DEFAULT 0,
    missed text NOT NULL DEFAULT 'latest',
    missed_max integer NOT NULL DEFAULT 10,
    active boolean NOT NULL DEFAULT true,
    next_fire_at timestamptz NOT NULL,
    last_fired_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_schedules_pkey PRIMARY KEY (organization_id, name),
    CONSTRAINT ck_job_schedules_missed CHECK (missed IN ('latest', 'skip', 'all')),
    CONSTRAINT ck_job_schedules_missed_max CHECK (missed_max >= 1),
    CONSTRAINT ck_job_schedules_jitter CHECK (jitter_seconds >= 0)
);

-- The due active schedules in cursor order, for the firers' claim (over
-- every tenant on one server, one tenant at a time on Citus) and for the
-- listing of tenants with due schedules.
CREATE INDEX idx_job_schedules_due ON job_schedules (next_fire_at, organization_id) WHERE active;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM create_distributed_table('job_schedules', 'organization_id', colocate_with => 'job_queue');
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE job_schedules;
