package reliability_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// A write that commits on its own (an unkeyed enqueue, fail, cancel; see
// TestCompleteKilled for complete) whose reply is lost after the server
// committed reports an unknown outcome (runledger.ErrCommitUnconfirmed),
// never a transient error whose advised retry would write twice; the
// write landed exactly once. An enqueue with a chosen job id is the safe
// retry: repeating it returns the job the lost call created.
func TestLostReplyOnAutocommitWriteIsUnconfirmed(t *testing.T) {
	t.Parallel()
	org := runledger.Organization(uuid.New())
	cases := []struct {
		name  string
		write func(ctx context.Context, pool *pgxpool.Pool, leased runledger.Job) error
		check func(t *testing.T, admin *pgxpool.Pool, leased runledger.Job)
	}{
		{"unkeyed enqueue", func(ctx context.Context, pool *pgxpool.Pool, _ runledger.Job) error {
			_, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: org, JobType: "email"})
			return err
		}, func(t *testing.T, admin *pgxpool.Pool, _ runledger.Job) {
			if n := testdb.Scalar[int64](t, admin, `SELECT count(*) FROM job_queue WHERE organization_id = $1 AND status = 'PENDING'`, testdb.Tenant(org)); n != 1 {
				t.Fatalf("%d pending jobs, want the one the lost call created", n)
			}
		}},
		{"fail", func(ctx context.Context, pool *pgxpool.Pool, j runledger.Job) error {
			fr := testdb.FailRequest(j)
			fr.ErrorCode = "smtp.down"
			_, err := lease.Fail(ctx, pool, fr)
			return err
		}, func(t *testing.T, admin *pgxpool.Pool, j runledger.Job) {
			if got := testdb.EventTypes(t, admin, j.ID); len(got) != 3 || got[2] != "RETRY_SCHEDULED" {
				t.Fatalf("events %v, want one RETRY_SCHEDULED after the lease", got)
			}
		}},
		{"cancel", func(ctx context.Context, pool *pgxpool.Pool, j runledger.Job) error {
			_, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{Scope: org, JobID: j.ID, Reason: "lost reply"})
			return err
		}, func(t *testing.T, admin *pgxpool.Pool, j runledger.Job) {
			if got := testdb.EventTypes(t, admin, j.ID); len(got) != 3 || got[2] != "CANCELED" {
				t.Fatalf("events %v, want one CANCELED after the lease", got)
			}
		}},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := testdb.Context(t)
			e := newEnv(t)
			testdb.DefineType(t, e.admin, "email")
			leased := testdb.Leased(t, ctx, e.admin, jobs.EnqueueRequest{Scope: org, JobType: "email"})
			proxy, pool, _ := e.proxied(nil)
			armLostWrite(t, ctx, proxy, pool)
			err := c.write(ctx, pool, leased)
			if proxy.Dropped() != 1 {
				t.Fatalf("the proxy swallowed %d replies, want 1", proxy.Dropped())
			}
			testdb.WantCommitUnconfirmed(t, err)
			c.check(t, e.admin, leased)
		})
	}

	// An unscoped write first reads its job's tenant (a statement of its
	// own): a reply lost there is transient, the write never sent.
	t.Run("unscoped fail, the tenant read's reply lost", func(t *testing.T) {
		t.Parallel()
		ctx := testdb.Context(t)
		e := newEnv(t)
		testdb.DefineType(t, e.admin, "email")
		leased := testdb.Leased(t, ctx, e.admin, jobs.EnqueueRequest{Scope: org, JobType: "email"})
		proxy, pool, _ := e.proxied(nil)
		proxy.DropReply("SELECT")
		fr := testdb.FailRequest(leased)
		fr.Scope = nil
		_, err := lease.Fail(ctx, pool, fr)
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy swallowed %d replies, want 1", proxy.Dropped())
		}
		testdb.WantCode(t, err, runledger.CodeTransient)
		if got := testdb.EventTypes(t, e.admin, leased.ID); len(got) != 2 {
			t.Fatalf("events %v, want the lease's two only", got)
		}
	})

	t.Run("enqueue with a chosen id, retried", func(t *testing.T) {
		t.Parallel()
		ctx := testdb.Context(t)
		e := newEnv(t)
		testdb.DefineType(t, e.admin, "email")
		proxy, pool, _ := e.proxied(nil)
		id := uuid.Must(uuid.NewV7())
		r := jobs.EnqueueRequest{Scope: org, JobType: "email", JobID: id, Payload: []byte(`{"n":1}`)}
		proxy.DropReply("COMMIT")
		_, err := jobs.Enqueue(ctx, pool, r)
		if proxy.Dropped() != 1 {
			t.Fatalf("the proxy swallowed %d replies, want 1", proxy.Dropped())
		}
		testdb.WantCommitUnconfirmed(t, err)
		again, err := jobs.Enqueue(ctx, e.admin, r)
		if err != nil || again.Disposition != runledger.DispositionExisting || again.Job.ID != id {
			t.Fatalf("retry: %+v, %v; want the lost call's job back", again, err)
		}
		if n := testdb.Count(t, e.admin, "job_queue"); n != 1 {
			t.Fatalf("%d jobs, want 1", n)
		}
		other := r
		other.Payload = []byte(`{"n":2}`)
		if _, err := jobs.Enqueue(ctx, e.admin, other); !errors.Is(err, runledger.CodeIdempotencyConflict) {
			t.Fatalf("another request with the id: %v, want an idempotency conflict", err)
		}
		// On Citus a job id is unique per tenant only (docs/SCALING.md):
		// another tenant's job may have it.
		if _, err := jobs.Enqueue(ctx, e.admin, jobs.EnqueueRequest{Scope: runledger.Global(), JobType: "email", JobID: id}); !testdb.Citus() && !errors.Is(err, runledger.CodeIdempotencyConflict) {
			t.Fatalf("the id from another scope: %v, want an idempotency conflict", err)
		}
	})
}
