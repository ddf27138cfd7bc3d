package requeue_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/requeue"
)

// Tenant isolation: a caller of scope X naming a job of scope Y (global,
// organization A, organization B, the job already requeued once in Y with
// the same reason) gets exactly NotFound from Job and JobTx, not_found
// from a bulk list, and a bulk filter of X never selects it; Y's job is
// left unchanged and, while X's transaction is open, unlocked.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	scopes := []runledger.Scope{runledger.Global(), runledger.Organization(uuid.New()), runledger.Organization(uuid.New())}
	fresh := map[int]uuid.UUID{}
	done := map[int]uuid.UUID{}
	for i, s := range scopes {
		ids := seedFinished(t, pool, s, "charge.capture", "DEAD_LETTERED", "provider.down", 2, time.Now().Add(-time.Hour))
		fresh[i], done[i] = ids[0], ids[1]
		mustRequeued(t)(requeue.Job(ctx, pool, requeue.Request{Scope: s, JobID: done[i], ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "same"}))
	}
	state := func() string {
		return testdb.Scalar[string](t, pool, `SELECT string_agg(id::text || status::text || run_number, ',' ORDER BY id) FROM job_queue`)
	}
	before := state()
	for x, sx := range scopes {
		for y := range scopes {
			if x == y {
				continue
			}
			for _, id := range []uuid.UUID{fresh[y], done[y]} {
				req := requeue.Request{Scope: sx, JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "same"}
				if out, err := requeue.Job(ctx, pool, req); err != nil || out != (requeue.NotFound{}) {
					t.Errorf("scope %s, job of %s: Job %T %v", sx, scopes[y], out, err)
				}
				tx := testdb.Begin(t, ctx, pool)
				if out, err := requeue.JobTx(ctx, tx, req); err != nil || out != (requeue.NotFound{}) {
					t.Errorf("scope %s, job of %s: JobTx %T %v", sx, scopes[y], out, err)
				}
				if testdb.RowLocked(t, pool, "job_queue", "id = $1", id, "KEY SHARE") || testdb.RowLocked(t, pool, "job_queue", "id = $1", id, "UPDATE") {
					t.Errorf("scope %s locked a job of %s", sx, scopes[y])
				}
				_ = tx.Rollback(ctx)
			}
			sum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: sx, Reason: "same", Sources: []requeue.Source{
				{JobID: fresh[y], ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1},
				{JobID: done[y], ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1},
			}}, nil)
			if err != nil || sum.NotFound != 2 || sum.Selected != 2 {
				t.Errorf("scope %s, bulk list of %s's jobs: %+v %v", sx, scopes[y], sum, err)
			}
		}
		// X's filter (a dry run) selects X's one dead-lettered job only.
		sum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: sx, Reason: "filter", DryRun: true,
			Filter: &requeue.Filter{Status: requeue.DeadLettered}}, nil)
		if err != nil || sum.Selected != 1 || sum.Requeued != 1 {
			t.Errorf("scope %s filter: %+v %v", sx, sum, err)
		}
	}
	if after := state(); after != before {
		t.Fatal("a cross-tenant call changed a job")
	}
}
