-- WorkflowRunInsert creates a workflow run, the owner of workflow steps.
-- name: WorkflowRunInsert :one
INSERT INTO workflow_runs (id, workflow_type, organization_id)
VALUES (@id, @workflow_type, @organization_id::uuid)
RETURNING *;

-- WorkflowStepInsert adds a step to a run; with a job_id the step owns that
-- job, which makes the job workflow-managed (a job has at most one owning
-- step: uq_workflow_steps_job_id).
-- name: WorkflowStepInsert :one
INSERT INTO workflow_steps (organization_id, id, workflow_run_id, step_key, execution_kind, job_id)
VALUES (@organization_id::uuid, @id, @workflow_run_id, @step_key, @execution_kind, sqlc.narg(job_id)::uuid)
RETURNING *;

-- WorkflowStepGetForJob returns the step of the tenant that owns a job, if
-- any. No lock.
-- name: WorkflowStepGetForJob :one
SELECT * FROM workflow_steps WHERE organization_id = @organization_id AND job_id = @job_id;
