-- +goose Up
-- The two foreign keys that refuse to delete a job still referenced (a
-- replay's lineage row, a workflow step) check with RESTRICT instead of
-- NO ACTION. Both are not deferrable, so PostgreSQL checks either at the
-- end of the deleting statement, with the same error (SQLSTATE 23503, the
-- same constraint names): deleting only a replay job is refused while its
-- lineage row stays, one statement deleting a source and its replay (or a
-- prune's batch, which deletes the lineage rows itself) succeeds. What
-- RESTRICT leaves out is NO ACTION's first step, a lookup of job_queue for
-- another row that now carries the deleted key (a key that came back in
-- the same statement): a job's key (organization_id, id) is never
-- updated or reused, so that lookup always came back empty, and it was
-- two of the index probes a pruned job paid. ON UPDATE stays NO ACTION.
-- Deleting a job a workflow step owns still unlinks the step first
-- (trg_job_queue_unlink_workflow_step, before the row goes). On Citus the
-- constraints are re-created on every colocated shard pair (Citus takes an
-- ADD CONSTRAINT only as an ALTER TABLE of its own).
ALTER TABLE job_replays DROP CONSTRAINT fk_job_replays_replay_job;
ALTER TABLE job_replays ADD CONSTRAINT fk_job_replays_replay_job FOREIGN KEY (organization_id, replay_job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE RESTRICT;
ALTER TABLE workflow_steps DROP CONSTRAINT fk_workflow_steps_job;
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE RESTRICT;

-- +goose Down
ALTER TABLE workflow_steps DROP CONSTRAINT fk_workflow_steps_job;
ALTER TABLE workflow_steps ADD CONSTRAINT fk_workflow_steps_job FOREIGN KEY (organization_id, job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE NO ACTION;
ALTER TABLE job_replays DROP CONSTRAINT fk_job_replays_replay_job;
ALTER TABLE job_replays ADD CONSTRAINT fk_job_replays_replay_job FOREIGN KEY (organization_id, replay_job_id)
    REFERENCES job_queue (organization_id, id) ON DELETE NO ACTION;
