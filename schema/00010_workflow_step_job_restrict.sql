-- +goose Up
-- The foreign key from a workflow step to its job refuses a delete with
-- RESTRICT instead of NO ACTION. It is not deferrable, so PostgreSQL
-- checks either at the end of the deleting statement; what RESTRICT leaves
-- out is NO ACTION's first step, a lookup of job_queue for another row that
-- now carries the deleted key (a key that came back in the same
-- statement): a job's key (organization_id, id) is never updated or
-- reused, so that lookup always came back empty, and every deleted job (a
-- prune's batch deletes thousands) paid it. The check itself never fires
-- for a delete: trg_job_queue_unlink_workflow_step unlinks the step before
-- its job goes (Citus refuses SET NULL on a key that holds the tenant), and
-- a step written with a missing job is refused by the insert's check,
-- 23503 as before. ON UPDATE stays NO ACTION.
--
-- fk_job_replays_replay_job stays NO ACTION: its violation (deleting only
-- a replay while its lineage row stays) is part of the contract as SQLSTATE
-- 23503, and PostgreSQL 18 reports a RESTRICT violation as 23001.
--
-- On Citus the constraint is re-created on every colocated shard pair
-- (Citus takes an ADD CONSTRAINT only as an ALTER TABLE of its own).
ALTER TABLE workflow_steps DROP CONSTRAINT fk_workflow_steps_job;
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE RESTRICT;

-- +goose Down
ALTER TABLE workflow_steps DROP CONSTRAINT fk_workflow_steps_job;
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE NO ACTION;
