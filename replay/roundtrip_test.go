package replay_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// Round trips are counted on the wire: a net.Conn wrapper, installed with
// pgx's ConnConfig.DialFunc, counts the client's writes that follow a read
// from the server (or come first). The client waits for the server between
// two such writes, so each one starts a round trip; writes in a row (a
// batch written in pieces) are one.

// tripCounter counts round trips on the connections it wraps.
type tripCounter struct {
	mu       sync.Mutex
	trips    int
	readLast bool
}

func (c *tripCounter) wrote() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readLast {
		c.trips++
		c.readLast = false
	}
}

func (c *tripCounter) read() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readLast = true
}

func (c *tripCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips
}

type countingConn struct {
	net.Conn
	c *tripCounter
}

func (cc countingConn) Write(b []byte) (int, error) {
	cc.c.wrote()
	return cc.Conn.Write(b)
}

func (cc countingConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	if n > 0 {
		cc.c.read()
	}
	return n, err
}

// countingPool opens a one-connection pool on a fresh database whose
// connection counts its round trips. The pool never pings a connection it
// hands out (pgxpool pings one idle for over a second by default, a round
// trip of the pool's, not of the operation).
func countingPool(t testing.TB) (*pgxpool.Pool, *tripCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := &tripCounter{readLast: true}
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, c: counter}, nil
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, counter
}

// trips runs fn and returns the round trips it made.
func trips(c *tripCounter, fn func()) int {
	before := c.count()
	fn()
	return c.count() - before
}

// The pool-owned path: 3 round trips to insert, 2 for an idempotent retry,
// 3 for a mismatch or NotFound (the reference protocol: 9, 4, 6 and 6).
// The caller-transaction path has no BEGIN or COMMIT of its own and folds
// the isolation check into the first lookup: 3, 1, 2 and 2 (it was 5, 2, 4
// and 4 with a separate isolation probe and one statement per round trip).
// Counts are with pgx's prepared-statement cache warm, as in any
// long-running program; the first use of each statement on a connection
// costs one more round trip per batch to prepare it.
func TestRoundTripsPerPath(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool, counter := countingPool(t)
	org := uuid.New()

	// The counter itself: one statement, one round trip (once connected).
	testdb.Exec(t, pool, `SELECT 1`)
	if n := trips(counter, func() { testdb.Exec(t, pool, `SELECT 1`) }); n != 1 {
		t.Fatalf("SELECT 1 counted as %d round trips", n)
	}

	// Warm the connection's statement cache with one call per entry point.
	warm := testdb.Seed(t, pool, testdb.Succeeded(runledger.Organization(org)))
	cold := trips(counter, func() {
		testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: runledger.Organization(org), SourceJobID: warm, ExpectedRunNumber: 1, Key: "warm", Reason: "r"}))
	})
	t.Logf("first owned replay on a fresh connection: %d round trips (statements being prepared)", cold)
	inTx(t, ctx, pool, func(tx pgx.Tx) {
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
	paths := []path{
		{name: "inserted", owned: 3, tx: 3,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: newSource(), ExpectedRunNumber: 1, Key: "k", Reason: "r"}
			},
			check: isInserted},
		{name: "existing", owned: 2, tx: 1,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: existingSource, ExpectedRunNumber: 1, Key: "done", Reason: "r"}
			},
			check: func(o replay.Outcome, err error) bool {
				r, ok := o.(replay.Replayed)
				return err == nil && ok && r.Disposition == runledger.DispositionExisting
			}},
		{name: "mismatch", owned: 3, tx: 2,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: newSource(), ExpectedRunNumber: 2, Key: "k", Reason: "r"}
			},
			check: func(o replay.Outcome, err error) bool {
				_, ok := o.(replay.ExpectationMismatch)
				return err == nil && ok
			}},
		{name: "not found", owned: 3, tx: 2,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"}
			},
			check: func(o replay.Outcome, err error) bool { _, ok := o.(replay.NotFound); return err == nil && ok }},
		{name: "conflict (rolled back)", owned: 2, tx: 1,
			req: func() replay.Request {
				return replay.Request{Scope: runledger.Organization(org), SourceJobID: existingSource, ExpectedRunNumber: 1, Key: "done", Reason: "other"}
			},
			check: func(_ replay.Outcome, err error) bool { return errors.Is(err, runledger.CodeReplayIdempotencyConflict) }},
	}
	for _, p := range paths {
		req := p.req()
		var out replay.Outcome
		var err error
		if n := trips(counter, func() { out, err = replay.SucceededJob(ctx, pool, req) }); !p.check(out, err) || n != p.owned {
			t.Errorf("SucceededJob %s: %d round trips (outcome %T %v), want %d", p.name, n, out, err, p.owned)
		} else {
			t.Logf("SucceededJob %s: %d round trips", p.name, n)
		}
		req = p.req()
		inTx(t, ctx, pool, func(tx pgx.Tx) {
			if n := trips(counter, func() { out, err = replay.SucceededJobTx(ctx, tx, req) }); !p.check(out, err) || n != p.tx {
				t.Errorf("SucceededJobTx %s: %d round trips (outcome %T %v), want %d", p.name, n, out, err, p.tx)
			} else {
				t.Logf("SucceededJobTx %s: %d round trips", p.name, n)
			}
		})
	}

	// A refused isolation level costs the one round trip of the lookup,
	// which read and locked nothing.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if n := trips(counter, func() {
		_, err = replay.SucceededJobTx(ctx, tx, replay.Request{Scope: runledger.Organization(org), SourceJobID: existingSource, ExpectedRunNumber: 1, Key: "done", Reason: "r"})
	}); n != 1 || !errors.Is(err, runledger.CodeReplayUnsupportedIsolation) {
		t.Errorf("refused isolation: %d round trips, err %v; want 1 and the refusal", n, err)
	}
	_ = tx.Rollback(ctx)
}

// inTx runs fn in a transaction of pool's, rolled back afterwards.
func inTx(t *testing.T, ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx)) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	fn(tx)
}
