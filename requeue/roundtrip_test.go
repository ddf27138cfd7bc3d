package requeue_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/requeue"
)

// Every outcome costs one round trip pool-owned (BEGIN to COMMIT in one
// pipeline) and two in a caller's transaction (the SHOW probe of its
// isolation and access mode, then the pipeline), counted on the wire with
// pgx's statement cache warm. On Citus each costs one more: the requeue,
// then its event or the classification of a miss with the COMMIT. A
// refused isolation costs the probe only.
func TestRoundTripsPerOutcome(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool, counter := testdb.CountingPool(t)
	org := runledger.Organization(uuid.New())
	testdb.Exec(t, pool, `SELECT 1`)

	// Warm the statement cache with a requeue through each entry point.
	mustRequeued(t)(requeue.Job(ctx, pool, request(t, deadLettered(t, ctx, pool, org), "warm")))
	warm := request(t, deadLettered(t, ctx, pool, org), "warm")
	testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
		mustRequeued(t)(requeue.JobTx(ctx, tx, warm))
	})
	done := deadLettered(t, ctx, pool, org)
	mustRequeued(t)(requeue.Job(ctx, pool, request(t, done, "done")))
	// And through a miss (on Citus its own statements).
	mustRequeued(t)(requeue.Job(ctx, pool, request(t, done, "done")))
	owned, joined := 1, 2
	if testdb.Citus() {
		owned, joined = 2, 3
	}
	live := canceledLive(t, ctx, pool, org)
	managed := deadLettered(t, ctx, pool, org)
	testdb.OwnByWorkflowStep(t, pool, managed.ID)

	is := func(want string) func(requeue.Outcome, error) bool {
		return func(o requeue.Outcome, err error) bool {
			if err != nil {
				return want == "workflow" && errors.Is(err, runledger.CodeWorkflowManaged)
			}
			switch v := o.(type) {
			case requeue.Requeued:
				return string(v.Disposition) == want
			case requeue.ExpectationMismatch:
				return want == "mismatch"
			case requeue.NotQuiesced:
				return want == "not quiesced"
			case requeue.NotFound:
				return want == "not found"
			}
			return false
		}
	}
	paths := []struct {
		name string
		req  func() requeue.Request
	}{
		{"inserted", func() requeue.Request { return request(t, deadLettered(t, ctx, pool, org), "r") }},
		{"existing", func() requeue.Request { return request(t, done, "done") }},
		{"mismatch", func() requeue.Request { r := request(t, done, "done"); r.ExpectedRunNumber = 5; return r }},
		{"not quiesced", func() requeue.Request { return request(t, live, "r") }},
		{"not found", func() requeue.Request { r := request(t, done, "done"); r.JobID = uuid.New(); return r }},
		{"workflow", func() requeue.Request { return request(t, managed, "r") }},
	}
	for _, p := range paths {
		check := is(p.name)
		req := p.req()
		var out requeue.Outcome
		var err error
		if n := testdb.Trips(counter, func() { out, err = requeue.Job(ctx, pool, req) }); !check(out, err) || n != owned {
			t.Errorf("Job %s: %d round trips (%T %v), want %d", p.name, n, out, err, owned)
		}
		req = p.req()
		testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
			if n := testdb.Trips(counter, func() { out, err = requeue.JobTx(ctx, tx, req) }); !check(out, err) || n != joined {
				t.Errorf("JobTx %s: %d round trips (%T %v), want %d", p.name, n, out, err, joined)
			}
		})
	}

	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if n := testdb.Trips(counter, func() { _, err = requeue.JobTx(ctx, tx, request(t, done, "done")) }); n != 1 || !errors.Is(err, requeue.CodeUnsupportedIsolation) {
		t.Errorf("refused isolation: %d round trips, %v", n, err)
	}
	_ = tx.Rollback(ctx)
}
