-- +goose Up
-- job_queue.updated_at is set by every statement that updates a job
-- (queries/: each UPDATE of job_queue sets updated_at = now(), which a test
-- of the plan audit checks), not by a row trigger: the trigger ran a
-- PL/pgSQL call for every row of every claim, heartbeat and completion.
-- An UPDATE written by hand no longer moves updated_at unless it sets it.
-- Citus handles a trigger of a distributed table (dropping one too) only
-- with this setting (a placeholder elsewhere).
SET LOCAL citus.enable_unsafe_triggers TO on;
DROP TRIGGER trg_job_queue_set_updated_at ON job_queue;

-- +goose Down
-- The trigger touches only its own row, as Citus requires.
SET LOCAL citus.enable_unsafe_triggers TO on;
CREATE TRIGGER trg_job_queue_set_updated_at
    BEFORE UPDATE ON job_queue
    FOR EACH ROW EXECUTE FUNCTION set_updated_at_timestamp();
