package jobs

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// WorkflowStepRequest asks for a job owned by a new workflow step.
type WorkflowStepRequest struct {
	// WorkflowType names the kind of workflow run created to own the step.
	WorkflowType string
	// StepKey names the step within its run.
	StepKey string
	// Job is the step's job; it must be unkeyed, without a chosen JobID
	// (the transaction is the unit a retry repeats). The run belongs to
	// the job's scope.
	Job EnqueueRequest
}

// Validate checks the request without touching the database: workflow
// type (job.workflow_type_invalid) and step key
// (job.workflow_step_key_invalid) non-blank and clean, the job unkeyed
// and without a chosen id (job.workflow_step_job_keyed) and valid
// (EnqueueRequest.Validate).
func (r WorkflowStepRequest) Validate() error {
	if validate.Text(r.WorkflowType, 0) != validate.OK {
		return validate.Invalid(errWorkflowTypeInvalid, "workflow type is blank or holds a NUL byte or invalid UTF-8")
	}
	if validate.Text(r.StepKey, 0) != validate.OK {
		return validate.Invalid(errWorkflowStepKeyInvalid, "workflow step key is blank or holds a NUL byte or invalid UTF-8")
	}
	if r.Job.IdempotencyKey != "" || r.Job.JobID != uuid.Nil {
		return validate.Invalid(errWorkflowStepJobKeyed, "workflow step jobs are enqueued unkeyed, with a fresh id")
	}
	return r.Job.Validate()
}

// WorkflowStepJob is the job a workflow step owns, with the run and step
// created for it.
type WorkflowStepJob struct {
	WorkflowRunID  uuid.UUID     `json:"workflow_run_id"`
	WorkflowStepID uuid.UUID     `json:"workflow_step_id"`
	Job            runledger.Job `json:"job"`
}

// EnqueueWorkflowStep enqueues a job owned by a workflow step, in a READ
// COMMITTED transaction of its own: the job and its ENQUEUED event (as
// Enqueue, unkeyed), a new workflow run of the job's scope, and a JOB step
// that owns the job. All three commit together or not at all. The job is
// then workflow-managed: compare-and-replay refuses it
// (runledger.CodeWorkflowManaged). A missing or disabled definition is
// runledger.CodeDefinitionNotFoundOrDisabled and writes nothing.
func EnqueueWorkflowStep(ctx context.Context, pool *pgxpool.Pool, req WorkflowStepRequest) (WorkflowStepJob, error) {
	if err := req.Validate(); err != nil {
		return WorkflowStepJob{}, err
	}
	return txn.ReadCommitted(ctx, pool, "workflow step enqueue", func(q db.DBTX) (WorkflowStepJob, error) {
		return enqueueWorkflowStep(ctx, q, req)
	})
}

// EnqueueWorkflowStepTx is EnqueueWorkflowStep inside the caller's
// transaction, which it never commits or rolls back. Any isolation level
// works (the job is unkeyed).
func EnqueueWorkflowStepTx(ctx context.Context, tx pgx.Tx, req WorkflowStepRequest) (WorkflowStepJob, error) {
	return txn.Validated(ctx, tx, req, enqueueWorkflowStep)
}

func enqueueWorkflowStep(ctx context.Context, tx db.DBTX, req WorkflowStepRequest) (WorkflowStepJob, error) {
	params, err := enqueueParams(req.Job)
	if err != nil {
		return WorkflowStepJob{}, err
	}
	enq, err := insertUnkeyed(ctx, tx, params)
	if err != nil {
		return WorkflowStepJob{}, err
	}
	runID, err := uuid.NewV7()
	if err != nil {
		return WorkflowStepJob{}, errs.Invariant("generate workflow run id: " + err.Error())
	}
	stepID, err := uuid.NewV7()
	if err != nil {
		return WorkflowStepJob{}, errs.Invariant("generate workflow step id: " + err.Error())
	}
	run, err := queries.WorkflowRunInsert(ctx, tx, db.WorkflowRunInsertParams{
		ID: runID, WorkflowType: req.WorkflowType, OrganizationID: rows.Tenant(req.Job.Scope),
	})
	if err != nil {
		return WorkflowStepJob{}, dberr.Translate(ctx, "insert workflow run", err)
	}
	jobID := enq.Job.ID
	step, err := queries.WorkflowStepInsert(ctx, tx, db.WorkflowStepInsertParams{
		OrganizationID: rows.Tenant(req.Job.Scope), ID: stepID, WorkflowRunID: run.ID, StepKey: req.StepKey,
		ExecutionKind: db.WorkflowStepExecutionKindJOB, JobID: &jobID,
	})
	if err != nil {
		return WorkflowStepJob{}, dberr.Translate(ctx, "insert workflow step", err)
	}
	return WorkflowStepJob{WorkflowRunID: run.ID, WorkflowStepID: step.ID, Job: enq.Job}, nil
}

// WorkflowStepFor returns the id of the workflow step that owns a job in
// the caller's scope, or nil when no step owns it (a direct job, or no
// such job in the scope). No lock.
func WorkflowStepFor(ctx context.Context, q Querier, scope runledger.Scope, jobID uuid.UUID) (*uuid.UUID, error) {
	if err := validate.Scope(scope); err != nil {
		return nil, err
	}
	q = txn.Wrap(q)
	step, err := queries.WorkflowStepGetForJob(ctx, q, db.WorkflowStepGetForJobParams{OrganizationID: rows.Tenant(scope), JobID: &jobID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dberr.Translate(ctx, "get workflow step for job", err)
	}
	return &step.ID, nil
}
