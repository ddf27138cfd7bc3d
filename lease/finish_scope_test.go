package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// finishFunc is one of the four ways to finish a leased job, with the
// request built from a lease, an optional scope and a worker override.
type finishFunc func(ctx context.Context, pool *pgxpool.Pool, l runledger.Job, scope *runledger.Scope, worker string) (runledger.Job, error)

// finishers are Complete, CompleteTx, Fail and FailTx (the Tx forms in a
// transaction of their own, committed on success, rolled back otherwise).
var finishers = map[string]finishFunc{
	"Complete": func(ctx context.Context, pool *pgxpool.Pool, l runledger.Job, scope *runledger.Scope, worker string) (runledger.Job, error) {
		req := testdb.CompleteRequest(l)
		req.Scope, req.WorkerID = scope, worker
		return lease.Complete(ctx, pool, req)
	},
	"CompleteTx": func(ctx context.Context, pool *pgxpool.Pool, l runledger.Job, scope *runledger.Scope, worker string) (runledger.Job, error) {
		req := testdb.CompleteRequest(l)
		req.Scope, req.WorkerID = scope, worker
		return commitOnSuccess(ctx, pool, func(ctx context.Context, tx pgx.Tx) (runledger.Job, error) { return lease.CompleteTx(ctx, tx, req) })
	},
	"Fail": func(ctx context.Context, pool *pgxpool.Pool, l runledger.Job, scope *runledger.Scope, worker string) (runledger.Job, error) {
		req := testdb.FailRequest(l)
		req.Scope, req.WorkerID = scope, worker
		req.RetryDelay = testdb.Ptr(time.Hour) // a retry never comes due during the test
		return lease.Fail(ctx, pool, req)
	},
	"FailTx": func(ctx context.Context, pool *pgxpool.Pool, l runledger.Job, scope *runledger.Scope, worker string) (runledger.Job, error) {
		req := testdb.FailRequest(l)
		req.Scope, req.WorkerID = scope, worker
		req.RetryDelay = testdb.Ptr(time.Hour) // a retry never comes due during the test
		return commitOnSuccess(ctx, pool, func(ctx context.Context, tx pgx.Tx) (runledger.Job, error) { return lease.FailTx(ctx, tx, req) })
	},
}

// commitOnSuccess runs f in a transaction of its own on pool: committed when f
// succeeds, rolled back when it fails.
func commitOnSuccess(ctx context.Context, pool *pgxpool.Pool, f func(context.Context, pgx.Tx) (runledger.Job, error)) (runledger.Job, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return runledger.Job{}, err
	}
	j, err := f(ctx, tx)
	if err != nil {
		_ = tx.Rollback(ctx)
		return runledger.Job{}, err
	}
	return j, tx.Commit(ctx)
}

// errorText is everything an error can show a caller or a log: its
// printed forms and its message and detail.
func errorText(err error) string {
	parts := []string{fmt.Sprint(err), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)}
	var e *runledger.Error
	if errors.As(err, &e) {
		parts = append(parts, e.Message, e.Detail)
	}
	return strings.Join(parts, "\n")
}

func TestFinishWithScopeOutsideItIsNotFoundAndChangesNothing(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	orgA, orgB := uuid.New(), uuid.New()
	for name, finish := range finishers {
		t.Run(name, func(t *testing.T) {
			orgJob := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(orgA)})
			globalJob := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
			cases := []struct {
				name   string
				job    runledger.Job
				scope  runledger.Scope
				worker string
			}{
				{"org job, other org", orgJob, runledger.Organization(orgB), *orgJob.WorkerID},
				{"org job, global", orgJob, runledger.Global(), *orgJob.WorkerID},
				{"global job, an org", globalJob, runledger.Organization(orgA), *globalJob.WorkerID},
				// Outside the scope a wrong lease is not found too, never a
				// mismatch that would tell the job exists.
				{"org job, other org, wrong worker", orgJob, runledger.Organization(orgB), "intruder"},
			}
			for _, c := range cases {
				before := testdb.JobState(t, ctx, pool, c.job.ID)
				_, err := finish(ctx, pool, c.job, &c.scope, c.worker)
				if !errors.Is(err, runledger.CodeJobNotFound) || runledger.CategoryOf(err) != runledger.CategoryNotFound {
					t.Fatalf("%s: err = %v (code %q), want job.not_found", c.name, err, runledger.CodeOf(err))
				}
				if text := errorText(err); strings.Contains(text, *c.job.WorkerID) || strings.Contains(text, "LEASED") {
					t.Fatalf("%s: a not-found error shows the job's lease: %s", c.name, text)
				}
				if after := testdb.JobState(t, ctx, pool, c.job.ID); after != before {
					t.Fatalf("%s: job changed by a refused finish:\n before %s\n after  %s", c.name, before, after)
				}
			}
		})
	}
}

func TestFinishWithScopeInsideItSucceeds(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	for name, finish := range finishers {
		t.Run(name, func(t *testing.T) {
			for _, scope := range []runledger.Scope{runledger.Organization(org), runledger.Global()} {
				l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
				got, err := finish(ctx, pool, l, &scope, *l.WorkerID)
				if err != nil {
					t.Fatalf("scope %s: %v", scope, err)
				}
				if got.ID != l.ID || got.Status == runledger.JobStatusLeased || runledger.ScopeOf(got.OrganizationID) != scope {
					t.Fatalf("scope %s: finished job %s %s in %s", scope, got.ID, got.Status, runledger.ScopeOf(got.OrganizationID))
				}
			}
		})
	}
}

func TestFinishWithoutScopeFinishesAJobOfAnyScope(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	for name, finish := range finishers {
		t.Run(name, func(t *testing.T) {
			for _, scope := range []runledger.Scope{runledger.Organization(uuid.New()), runledger.Global()} {
				l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
				got, err := finish(ctx, pool, l, nil, *l.WorkerID)
				if err != nil {
					t.Fatalf("job in %s: %v", scope, err)
				}
				if got.Status == runledger.JobStatusLeased {
					t.Fatalf("job in %s still LEASED", scope)
				}
				// Unscoped, a job that does not exist is still not found.
				missing := l
				missing.ID = uuid.New()
				_, err = finish(ctx, pool, missing, nil, *l.WorkerID)
				testdb.WantCode(t, err, runledger.CodeJobNotFound)
			}
		})
	}
}

// allStatuses are the job status names a detail must not show on the
// unscoped path.
var allStatuses = []string{"PENDING", "LEASED", "SUCCEEDED", "DEAD_LETTERED", "CANCELED"}

func TestFinishLeaseMismatchNeverNamesTheHolder(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	const holder = "holder-7f3a9c"
	for name, finish := range finishers {
		t.Run(name, func(t *testing.T) {
			j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(org)})
			testdb.Exec(t, pool, `UPDATE job_queue SET priority = 2147483647 WHERE id = $1`, j.ID)
			got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{WorkerID: holder, Limit: 1})
			if len(got) != 1 || got[0].ID != j.ID {
				t.Fatalf("claimed %v, want %s", testdb.IDs(got), j.ID)
			}
			l := got[0]
			// The request names another worker and another run and attempt,
			// so that the job's own values are told apart from the request's.
			req := l
			req.RunNumber, req.Attempt = 5, 9

			// Unscoped: neither the holder nor the job's status, run or
			// attempt.
			before := testdb.JobState(t, ctx, pool, l.ID)
			_, err := finish(ctx, pool, req, nil, "intruder")
			testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
			text := errorText(err)
			if strings.Contains(text, holder) {
				t.Fatalf("unscoped mismatch names the holding worker: %s", text)
			}
			for _, s := range allStatuses {
				if strings.Contains(text, s) {
					t.Fatalf("unscoped mismatch names the job's status %s: %s", s, text)
				}
			}
			if strings.Contains(text, "run 1") || strings.Contains(text, "attempt 1") {
				t.Fatalf("unscoped mismatch names the job's run or attempt: %s", text)
			}
			if after := testdb.JobState(t, ctx, pool, l.ID); after != before {
				t.Fatalf("job changed by a refused finish:\n before %s\n after  %s", before, after)
			}

			// Scoped, in scope: the status, run and attempt, never the holder.
			scope := runledger.Organization(org)
			_, err = finish(ctx, pool, req, &scope, "intruder")
			testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
			text = errorText(err)
			if strings.Contains(text, holder) {
				t.Fatalf("scoped mismatch names the holding worker: %s", text)
			}
			var e *runledger.Error
			if !errors.As(err, &e) || !strings.Contains(e.Detail, "LEASED at run 1 attempt 1") {
				t.Fatalf("scoped mismatch detail %q does not say the job is LEASED at run 1 attempt 1", e.Detail)
			}
			if after := testdb.JobState(t, ctx, pool, l.ID); after != before {
				t.Fatalf("job changed by a refused finish:\n before %s\n after  %s", before, after)
			}

			// Once finished by its holder the job is no longer leased; a
			// second finish by the holder is still a mismatch that does not
			// name the worker the job was finished by.
			if _, err := finish(ctx, pool, l, nil, holder); err != nil {
				t.Fatal(err)
			}
			_, err = finish(ctx, pool, l, &scope, "intruder")
			testdb.WantCode(t, err, runledger.CodeLeaseMismatch)
			if text := errorText(err); strings.Contains(text, holder) {
				t.Fatalf("mismatch on a finished job names its worker: %s", text)
			}
		})
	}
}
