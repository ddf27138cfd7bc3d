package jobs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// A keyed enqueue costs one round trip for every outcome (inserted,
// existing, conflict) on the pool (BEGIN to COMMIT in one pipeline), and
// two in a caller's transaction (the SHOW probe of its isolation and
// access mode, then the pipeline); an unkeyed one is a single statement.
// Counts are with the statement cache warm. On Citus an enqueue is three
// round trips (the definition, the insert with the lookups, the event with
// the COMMIT), the last one not sent in a caller's transaction when
// nothing was inserted.
func TestEnqueueRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool, counter := testdb.CountingPool(t)
	testdb.DefineType(t, pool, "email")
	org := runledger.Organization(uuid.New())

	inTx := func(fn func(tx pgx.Tx)) { testdb.InTx(t, ctx, pool, fn) }
	// Warm the statement cache on the pool's one connection.
	for _, scope := range []runledger.Scope{runledger.Global(), org} {
		if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "email", Scope: scope, IdempotencyKey: "warm"}); err != nil {
			t.Fatal(err)
		}
		inTx(func(tx pgx.Tx) {
			if _, err := jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email", Scope: scope, IdempotencyKey: "warm-tx"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "email"}); err != nil {
		t.Fatal(err)
	}

	for _, scope := range []runledger.Scope{runledger.Global(), org} {
		key := uuid.NewString()
		cases := []struct {
			name  string
			req   jobs.EnqueueRequest
			check func(jobs.EnqueueResult, error) bool
		}{
			{"inserted", jobs.EnqueueRequest{JobType: "email", Scope: scope, IdempotencyKey: key},
				func(r jobs.EnqueueResult, err error) bool {
					return err == nil && r.Disposition == runledger.DispositionInserted
				}},
			{"existing", jobs.EnqueueRequest{JobType: "email", Scope: scope, IdempotencyKey: key},
				func(r jobs.EnqueueResult, err error) bool {
					return err == nil && r.Disposition == runledger.DispositionExisting
				}},
			{"conflict", jobs.EnqueueRequest{JobType: "email", Scope: scope, IdempotencyKey: key, Payload: []byte(`{"other":true}`)},
				func(_ jobs.EnqueueResult, err error) bool { return errors.Is(err, runledger.CodeIdempotencyConflict) }},
			{"unkeyed", jobs.EnqueueRequest{JobType: "email", Scope: scope},
				func(r jobs.EnqueueResult, err error) bool {
					return err == nil && r.Disposition == runledger.DispositionInserted
				}},
		}
		for _, c := range cases {
			var res jobs.EnqueueResult
			var err error
			want := 1
			if testdb.Citus() {
				want = 3
			}
			if n := testdb.Trips(counter, func() { res, err = jobs.Enqueue(ctx, pool, c.req) }); n != want || !c.check(res, err) {
				t.Errorf("%s Enqueue %s: %d round trips (%+v, %v), want %d", scope, c.name, n, res.Disposition, err, want)
			}
		}
		// In a caller's transaction the key's first enqueue there is
		// inserted again (the pool's was committed under another key).
		txKey := uuid.NewString()
		inTx(func(tx pgx.Tx) {
			for _, c := range cases {
				c.req.IdempotencyKey = map[bool]string{true: txKey, false: ""}[c.req.IdempotencyKey != ""]
				var res jobs.EnqueueResult
				var err error
				// A keyed enqueue first checks the caller's transaction
				// with SHOW: one round trip more.
				want := 1
				if testdb.Citus() {
					want = 3
					if c.name == "existing" || c.name == "conflict" {
						want = 2
					}
				}
				if c.req.IdempotencyKey != "" {
					want++
				}
				if n := testdb.Trips(counter, func() { res, err = jobs.EnqueueTx(ctx, tx, c.req) }); n != want || !c.check(res, err) {
					t.Errorf("%s EnqueueTx %s: %d round trips (%+v, %v), want %d", scope, c.name, n, res.Disposition, err, want)
				}
			}
		})
	}

	// A refused isolation costs the one round trip of the SHOW probe and
	// writes nothing.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	before := testdb.Count(t, tx, "job_queue")
	if n := testdb.Trips(counter, func() {
		_, err = jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "refused"})
	}); n != 1 || !errors.Is(err, runledger.CodeEnqueueUnsupportedIsolation) {
		t.Errorf("refused isolation: %d round trips, %v", n, err)
	}
	if testdb.Count(t, tx, "job_queue") != before {
		t.Error("a refused keyed enqueue wrote a job")
	}
}
