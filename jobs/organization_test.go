package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// organization_id stores the global scope as the nil UUID, so
// Organization(uuid.Nil) would act in Global under another name: every
// entry point that takes a scope refuses it before it reads or writes.
func TestNilOrganizationIsRefusedEverywhere(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	leased := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	before := testdb.JobState(t, ctx, pool, leased.ID)
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
		"Get": func(ctx context.Context) error { _, err := inspect.Get(ctx, pool, nilOrg, leased.ID); return err },
		"Events": func(ctx context.Context) error {
			_, err := inspect.Events(ctx, pool, nilOrg, leased.ID)
			return err
		},
		"NewestEvents": func(ctx context.Context) error {
			_, err := inspect.NewestEvents(ctx, pool, nilOrg, leased.ID, 5)
			return err
		},
		"List": func(ctx context.Context) error {
			_, err := inspect.List(ctx, pool, inspect.ListRequest{Scope: nilOrg, Limit: 5})
			return err
		},
		"GetDetail": func(ctx context.Context) error {
			_, err := inspect.GetDetail(ctx, pool, inspect.DetailRequest{Scope: nilOrg, JobID: leased.ID})
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
			_, err := lease.Complete(ctx, pool, req)
			return err
		},
		"CompleteMany": func(ctx context.Context) error {
			req := testdb.CompleteRequest(leased)
			req.Scope = &nilOrg
			_, err := lease.CompleteMany(ctx, pool, []lease.CompleteRequest{req})
			return err
		},
		"Fail": func(ctx context.Context) error {
			req := testdb.FailRequest(leased)
			req.Scope = &nilOrg
			_, err := lease.Fail(ctx, pool, req)
			return err
		},
		"Heartbeat": func(ctx context.Context) error {
			_, err := lease.Heartbeat(ctx, pool, lease.HeartbeatRequest{Scope: &nilOrg, JobID: leased.ID, RunNumber: leased.RunNumber,
				Attempt: leased.Attempt, WorkerID: *leased.WorkerID, Lease: time.Minute})
			return err
		},
		"Release": func(ctx context.Context) error {
			_, err := lease.Release(ctx, pool, []lease.ReleaseRequest{{Scope: &nilOrg, JobID: leased.ID, RunNumber: leased.RunNumber,
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
	if after := testdb.JobState(t, ctx, pool, leased.ID); after != before {
		t.Fatalf("a refused call changed the job:\n before %s\n after  %s", before, after)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != jobsBefore {
		t.Fatalf("%d jobs after the refused calls, want %d", n, jobsBefore)
	}
}
