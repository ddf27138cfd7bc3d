package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// organization_id stores the global scope as the nil UUID, so
// Organization(uuid.Nil) would act in Global under another name: every
// entry point that takes a scope refuses it before it reads or writes.
func TestNilOrganizationIsRefusedEverywhere(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	leased := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	before := jobState(t, ctx, pool, leased.ID)
	jobsBefore := testdb.Count(t, pool, "job_queue")
	nilOrg := runledger.Organization(uuid.Nil)
	calls := map[string]func(context.Context) error{
		"Enqueue": func(ctx context.Context) error {
			_, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: nilOrg, JobType: "email"})
			return err
		},
		"Enqueue keyed": func(ctx context.Context) error {
			_, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: nilOrg, JobType: "email", IdempotencyKey: "k"})
			return err
		},
		"Get": func(ctx context.Context) error { _, err := jobs.Get(ctx, pool, nilOrg, leased.ID); return err },
		"Events": func(ctx context.Context) error {
			_, err := jobs.Events(ctx, pool, nilOrg, leased.ID)
			return err
		},
		"NewestEvents": func(ctx context.Context) error {
			_, err := jobs.NewestEvents(ctx, pool, nilOrg, leased.ID, 5)
			return err
		},
		"List": func(ctx context.Context) error {
			_, err := jobs.List(ctx, pool, jobs.ListRequest{Scope: nilOrg, Limit: 5})
			return err
		},
		"GetDetail": func(ctx context.Context) error {
			_, err := jobs.GetDetail(ctx, pool, jobs.DetailRequest{Scope: nilOrg, JobID: leased.ID})
			return err
		},
		"Cancel": func(ctx context.Context) error {
			_, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: nilOrg, JobID: leased.ID})
			return err
		},
		"WorkflowStepFor": func(ctx context.Context) error {
			_, err := jobs.WorkflowStepFor(ctx, pool, nilOrg, leased.ID)
			return err
		},
		"Complete": func(ctx context.Context) error {
			req := testdb.CompleteRequest(leased)
			req.Scope = &nilOrg
			_, err := jobs.Complete(ctx, pool, req)
			return err
		},
		"CompleteMany": func(ctx context.Context) error {
			req := testdb.CompleteRequest(leased)
			req.Scope = &nilOrg
			_, err := jobs.CompleteMany(ctx, pool, []jobs.CompleteRequest{req})
			return err
		},
		"Fail": func(ctx context.Context) error {
			req := testdb.FailRequest(leased)
			req.Scope = &nilOrg
			_, err := jobs.Fail(ctx, pool, req)
			return err
		},
		"Heartbeat": func(ctx context.Context) error {
			_, err := jobs.Heartbeat(ctx, pool, jobs.HeartbeatRequest{Scope: &nilOrg, JobID: leased.ID, RunNumber: leased.RunNumber,
				Attempt: leased.Attempt, WorkerID: *leased.WorkerID, Lease: time.Minute})
			return err
		},
		"Release": func(ctx context.Context) error {
			_, err := jobs.Release(ctx, pool, []jobs.ReleaseRequest{{Scope: &nilOrg, JobID: leased.ID, RunNumber: leased.RunNumber,
				Attempt: leased.Attempt, WorkerID: *leased.WorkerID}})
			return err
		},
	}
	for name, call := range calls {
		e := testdb.WantCode(t, call(ctx), runledger.CodeOrganizationInvalid)
		if e.Category != runledger.CategoryValidation {
			t.Fatalf("%s: category %s, want validation", name, e.Category)
		}
	}
	if after := jobState(t, ctx, pool, leased.ID); after != before {
		t.Fatalf("a refused call changed the job:\n before %s\n after  %s", before, after)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != jobsBefore {
		t.Fatalf("%d jobs after the refused calls, want %d", n, jobsBefore)
	}
}
