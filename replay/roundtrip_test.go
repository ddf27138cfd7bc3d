package replay_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// Every outcome costs one round trip, pool-owned (BEGIN to COMMIT in one
// pipeline; the reference protocol: 9, 4, 6 and 6) and in a caller's
// transaction (the same pipeline without BEGIN and COMMIT; the isolation
// and access-mode checks travel with its statements). On Citus an insert
// is a second round trip (the replay's writes, after the source is
// locked, and COMMIT), and so is the COMMIT of an owned transaction that
// wrote nothing. A conflict found by the first lookup commits a
// transaction that wrote nothing, so it needs no ROLLBACK. Counts are with
// pgx's prepared-statement cache warm, as in any long-running program; the
// first use of each statement on a connection costs one more round trip to
// prepare them.
func TestRoundTripsPerPath(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool, counter := testdb.CountingPool(t)
	org := uuid.New()

	// The counter itself: one statement, one round trip (once connected).
	testdb.Exec(t, pool, `SELECT 1`)
	if n := testdb.Trips(counter, func() { testdb.Exec(t, pool, `SELECT 1`) }); n != 1 {
		t.Fatalf("SELECT 1 counted as %d round trips", n)
	}

	// Warm the connection's statement cache with one call per entry point.
	warm := testdb.Seed(t, pool, testdb.Succeeded(runledger.Organization(org)))
	cold := testdb.Trips(counter, func() {
		testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: runledger.Organization(org), SourceJobID: warm, ExpectedRunNumber: 1, Key: "warm", Reason: "r"}))
	})
	t.Logf("first owned replay on a fresh connection: %d round trips (statements being prepared)", cold)
	testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
		testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, replay.Request{Scope: runledger.Organization(org), SourceJobID: warm, ExpectedRunNumber: 1, Key: "warm-tx", Reason: "r"}))
	})

	type path struct {
		name      string
		req       func() replay.Request
		check     func(replay.Outcome, error) bool
		owned, tx int
	}
	newSource := func() uuid.UUID { return testdb.Seed(t, pool, testdb.Succeeded(runledger.Organization(org))) }
	existingSource := newSource()
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: runledger.Organization(org), SourceJobID: existingSource, ExpectedRunNumber: 1, Key: "done", Reason: "r"}))
	isInserted := func(o replay.Outcome, err error) bool {
		r, ok := o.(replay.Replayed)
		return err == nil && ok && r.Disposition == runledger.DispositionInserted
	}
	// On Citus: the second round trip of an insert, and an owned
	// transaction's COMMIT after the first.
	insertTrips, ownedTrips := 1, 1
	if testdb.Citus() {
		insertTrips, ownedTrips = 2, 2
	}
	paths := []path{
		{name: "inserted", owned: insertTrips, tx: insertTrips,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: newSource(), ExpectedRunNumber: 1, Key: "k", Reason: "r"}
			},
			check: isInserted},
		{name: "existing", owned: ownedTrips, tx: 1,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: existingSource, ExpectedRunNumber: 1, Key: "done", Reason: "r"}
			},
			check: func(o replay.Outcome, err error) bool {
				r, ok := o.(replay.Replayed)
				return err == nil && ok && r.Disposition == runledger.DispositionExisting
			}},
		{name: "mismatch", owned: ownedTrips, tx: 1,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: newSource(), ExpectedRunNumber: 2, Key: "k", Reason: "r"}
			},
			check: func(o replay.Outcome, err error) bool {
				_, ok := o.(replay.ExpectationMismatch)
				return err == nil && ok
			}},
		{name: "not found", owned: ownedTrips, tx: 1,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"}
			},
			check: func(o replay.Outcome, err error) bool { _, ok := o.(replay.NotFound); return err == nil && ok }},
		{name: "conflict", owned: ownedTrips, tx: 1,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: existingSource, ExpectedRunNumber: 1, Key: "done", Reason: "other"}
			},
			check: func(_ replay.Outcome, err error) bool { return errors.Is(err, runledger.CodeReplayIdempotencyConflict) }},
	}
	for _, p := range paths {
		req := p.req()
		var out replay.Outcome
		var err error
		if n := testdb.Trips(counter, func() { out, err = replay.SucceededJob(ctx, pool, req) }); !p.check(out, err) || n != p.owned {
			t.Errorf("SucceededJob %s: %d round trips (outcome %T %v), want %d", p.name, n, out, err, p.owned)
		} else {
			t.Logf("SucceededJob %s: %d round trips", p.name, n)
		}
		req = p.req()
		testdb.InTx(t, ctx, pool, func(tx pgx.Tx) {
			if n := testdb.Trips(counter, func() { out, err = replay.SucceededJobTx(ctx, tx, req) }); !p.check(out, err) || n != p.tx {
				t.Errorf("SucceededJobTx %s: %d round trips (outcome %T %v), want %d", p.name, n, out, err, p.tx)
			} else {
				t.Logf("SucceededJobTx %s: %d round trips", p.name, n)
			}
		})
	}

	// A refused isolation level costs the one round trip of the statements,
	// whose guards read, locked and wrote nothing.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if n := testdb.Trips(counter, func() {
		_, err = replay.SucceededJobTx(ctx, tx, replay.Request{Scope: runledger.Organization(org), SourceJobID: existingSource, ExpectedRunNumber: 1, Key: "done", Reason: "r"})
	}); n != 1 || !errors.Is(err, runledger.CodeReplayUnsupportedIsolation) {
		t.Errorf("refused isolation: %d round trips, err %v; want 1 and the refusal", n, err)
	}
	_ = tx.Rollback(ctx)
}
