package jobs_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

func TestUpsertDefinitionDefaultsKeepsNilSettingsAndVersions(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	d := testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "report"})
	if d.Version != 1 || d.MaxAttempts != 8 || d.DefaultTimeoutSeconds != 900 || d.DefaultPriority != 100 || !d.Enabled {
		t.Fatalf("new definition = %+v, want version 1 with defaults 8/900/100/enabled", d)
	}
	same := testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "report", MaxAttempts: testdb.Ptr[int32](8)})
	if same.Version != 1 {
		t.Fatalf("version after an upsert that changed nothing = %d, want 1", same.Version)
	}
	changed := testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "report", Priority: testdb.Ptr[int32](5), Enabled: testdb.Ptr(false)})
	if changed.Version != 2 || changed.DefaultPriority != 5 || changed.Enabled || changed.MaxAttempts != 8 || changed.DefaultTimeoutSeconds != 900 {
		t.Fatalf("changed definition = %+v, want version 2, priority 5, disabled, the rest kept", changed)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.UpsertDefinitionTx(ctx, tx, jobs.DefinitionInput{JobType: "report", MaxAttempts: testdb.Ptr[int32](2)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := jobs.GetDefinition(ctx, pool, "report")
	if err != nil || got.MaxAttempts != 8 || got.Version != 2 {
		t.Fatalf("definition after a rolled-back Tx upsert = %+v, %v", got, err)
	}
}

func TestGetDefinitionMissingAndListDefinitions(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	_, err := jobs.GetDefinition(ctx, pool, "nope")
	testdb.WantCode(t, err, runledger.CodeDefinitionMissing)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "alpha", Enabled: testdb.Ptr(false)})
	list, err := jobs.ListDefinitions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].JobType != "alpha" || list[0].Enabled || list[1].JobType != "email" {
		t.Fatalf("definitions = %+v, want alpha (disabled) then email", list)
	}
}

func TestEnqueueWorkflowStepOwnsTheJob(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	scope := runledger.Organization(org)
	res, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{
		WorkflowType: "onboarding", StepKey: "welcome-email",
		Job: jobs.EnqueueRequest{Scope: scope, JobType: "email"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.Status != runledger.JobStatusPending || res.Job.Scope() != scope {
		t.Fatalf("step job = %s in %s", res.Job.Status, res.Job.Scope())
	}
	step, err := jobs.WorkflowStepFor(ctx, pool, runledger.ScopeOf(res.Job.OrganizationID), res.Job.ID)
	if err != nil || step == nil || *step != res.WorkflowStepID {
		t.Fatalf("WorkflowStepFor = %v, %v; want %s", step, err, res.WorkflowStepID)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM workflow_runs r JOIN workflow_steps s ON s.organization_id = r.organization_id AND s.workflow_run_id = r.id
		WHERE r.id = $1 AND r.organization_id = $2 AND r.workflow_type = 'onboarding'
		  AND s.step_key = 'welcome-email' AND s.execution_kind = 'JOB' AND s.job_id = $3`,
		res.WorkflowRunID, org, res.Job.ID); n != 1 {
		t.Fatal("workflow run and step rows not as expected")
	}
	direct := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
	if step, err := jobs.WorkflowStepFor(ctx, pool, runledger.ScopeOf(direct.OrganizationID), direct.ID); err != nil || step != nil {
		t.Fatalf("WorkflowStepFor(direct job) = %v, %v; want nil", step, err)
	}

	// A succeeded step job is workflow-managed: replay refuses it.
	l := testdb.LeaseJob(t, ctx, pool, res.Job.ID)
	if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(l)); err != nil {
		t.Fatal(err)
	}
	_, err = replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: l.ID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	testdb.WantCode(t, err, runledger.CodeWorkflowManaged)
}

func TestEnqueueWorkflowStepWritesNothingWhenDefinitionMissing(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	_, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{
		WorkflowType: "w", StepKey: "s", Job: jobs.EnqueueRequest{JobType: "missing"},
	})
	testdb.WantCode(t, err, runledger.CodeDefinitionNotFoundOrDisabled)
	if n := testdb.Scalar[int](t, pool, `SELECT (SELECT count(*) FROM workflow_runs) + (SELECT count(*) FROM workflow_steps) + (SELECT count(*) FROM job_queue)`); n != 0 {
		t.Fatalf("%d rows written", n)
	}
}
