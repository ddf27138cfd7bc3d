package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/replay"
)

// The lock order of a bulk chunk (sources by id, then definitions FOR
// SHARE) keeps chunks and single replays from deadlocking, not a caller's
// transaction that takes the same locks in another order. These tests
// drive both kinds of deadlock the docs name. Which side PostgreSQL aborts
// is the one whose deadlock_timeout runs out while the cycle exists: the
// side that is to lose gets 20ms, the other a minute, and the side that
// closes the cycle is made to wait last, by waiting on pg_locks.
// deadlock_timeout is a superuser setting: the kit's own servers connect
// as postgres; a RUNLEDGER_TEST_DATABASE_URL needs a role that may set it
// (a superuser, or GRANT SET ON PARAMETER deadlock_timeout from 15 on).

type deadlockMarker struct{}

// connectWith opens one connection to url with the given session settings.
func connectWith(t *testing.T, url string, params map[string]string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestBulkChunkDeadlockedByACallerRunsAgain: a caller's transaction locks
// the job type's definition (an UPDATE) and then replays one of the
// chunk's sources while the chunk holds it: the chunk waits for the
// definition, the caller for the source. PostgreSQL aborts the chunk
// (40P01); it runs again, finds the caller's replay once the caller
// commits, and the action ends with every source replayed exactly once.
// (On Citus the tenant's worker node may abort the caller instead.)
func TestBulkChunkDeadlockedByACallerRunsAgain(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), deadlockMarker{}, true)
	url := testdb.NewURL(t)
	admin := testdb.OpenPool(t, url, 4, nil)
	pool := testdb.OpenPool(t, url, 2, map[string]string{"application_name": "bulk-deadlock", "deadlock_timeout": "20ms"})
	caller := connectWith(t, url, map[string]string{"deadlock_timeout": "1min"})
	scope := runledger.Global()
	ids := seedSucceeded(t, admin, scope, "email", 5, time.Now().Add(-time.Hour))
	const key, reason = "deadlock", "r"
	victim := ids[2]

	tx, err := caller.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `UPDATE job_definitions SET default_priority = default_priority + 1 WHERE job_type = 'email'`); err != nil {
		t.Fatal(err)
	}
	type replayed struct {
		out replay.Outcome
		err error
	}
	callerDone := make(chan replayed, 1)
	attempts := 0
	mine := func(ctx context.Context) bool { return ctx.Value(deadlockMarker{}) != nil }
	defer failpoint.EnableFor(replay.FailpointBulkAfterLock, func(ctx context.Context, arg any) {
		c := arg.(replay.BulkCall)
		if !mine(ctx) || c.Chunk != 0 {
			return
		}
		attempts++
		if c.Attempt != 1 {
			return
		}
		// The chunk holds its sources; the caller, holding the definition,
		// now waits for one of them. The chunk's insert will wait for the
		// definition and close the cycle.
		go func() {
			out, err := replay.SucceededJobTx(ctx, tx, replay.Request{Scope: scope, SourceJobID: victim, ExpectedRunNumber: 1, Key: key, Reason: reason})
			if err == nil {
				err = tx.Commit(ctx)
			}
			callerDone <- replayed{out, err}
		}()
		testdb.WaitBlocked(t, admin, caller.PgConn().PID())
	}, mine)()
	// The chunk's second run begins only once the caller has committed:
	// rolled back, the first run frees the source the caller waits for,
	// and a second run starting at once could take it first (a waiter
	// woken by the abort has no precedence over a newcomer) and deadlock
	// again.
	var theirs replayed
	begins := 0
	defer failpoint.EnableFor(txn.FailpointAfterBegin, func(ctx context.Context, arg any) {
		if c, ok := arg.(txn.FailpointCall); !ok || c.Op != replay.BulkOperation {
			return
		}
		if begins++; begins == 2 {
			theirs = <-callerDone
		}
	}, mine)()

	var chunkAttempts []int
	var results []replay.BulkResult
	sum, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: key, Reason: reason, Sources: listOf(ids, 1)},
		func(c replay.BulkChunk) error {
			chunkAttempts = append(chunkAttempts, c.Attempts)
			results = append(results, c.Results...)
			return nil
		})
	if err != nil {
		t.Fatalf("Bulk: %s", testdb.Detail(err))
	}
	if testdb.Citus() && begins < 2 {
		// On Citus the chunk share-locks the definition on the tenant's
		// worker node, where the cycle closes; that node's detector sees
		// neither session's deadlock_timeout and aborted the caller, which
		// waited first. The chunk went on and replayed every source.
		theirs = <-callerDone
		e := testdb.WantCode(t, theirs.err, runledger.CodeTransient)
		t.Logf("the caller was aborted (%s)", e.SQLState)
		if sum != (replay.BulkSummary{Selected: 5, Inserted: 5}) {
			t.Fatalf("summary %+v, want the 5 sources inserted once the caller was aborted", sum)
		}
		assertReplayedOnce(t, admin, key, ids)
		return
	}
	if theirs.err != nil || begins < 2 {
		t.Fatalf("the caller's replay (chunk begun %d times): %s", begins, testdb.Detail(theirs.err))
	}
	won := testdb.MustReplayed(t)(theirs.out, nil)
	if attempts != 2 || len(chunkAttempts) != 1 || chunkAttempts[0] != 2 {
		t.Fatalf("the chunk's lock ran %d times, reported attempts %v: want the deadlocked chunk run again (2)", attempts, chunkAttempts)
	}
	if sum != (replay.BulkSummary{Selected: 5, Inserted: 4, Existing: 1}) {
		t.Fatalf("summary %+v, want 4 inserted and the caller's replay existing", sum)
	}
	if r := results[2]; r.Result != replay.BulkExisting || r.ReplayJobID == nil || *r.ReplayJobID != won.Replay.JobID {
		t.Fatalf("the contested source: %+v, want existing as the caller's replay %s", r, won.Replay.JobID)
	}
	assertReplayedOnce(t, admin, key, ids)
}

// TestBulkChunkAndCallerReplayingInDescendingOrderDeadlock: a caller's
// transaction replays the higher of two sources, the chunk locks the
// lower and waits for the higher, then the caller replays the lower. The
// lock order cannot help: the caller closes the cycle, and here it is the
// one PostgreSQL aborts (db.transient, 40P01); the chunk then goes on,
// untouched.
func TestBulkChunkAndCallerReplayingInDescendingOrderDeadlock(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	url := testdb.NewURL(t)
	admin := testdb.OpenPool(t, url, 4, nil)
	pool := testdb.OpenPool(t, url, 2, map[string]string{"application_name": "bulk-deadlock", "deadlock_timeout": "1min"})
	caller := connectWith(t, url, map[string]string{"deadlock_timeout": "20ms"})
	scope := runledger.Global()
	ids := seedSucceeded(t, admin, scope, "email", 2, time.Now().Add(-time.Hour))
	lo, hi := ids[0], ids[1]
	if lo.String() > hi.String() {
		lo, hi = hi, lo
	}
	const key, reason = "descending", "r"
	req := func(id uuid.UUID) replay.Request {
		return replay.Request{Scope: scope, SourceJobID: id, ExpectedRunNumber: 1, Key: key, Reason: reason}
	}

	tx, err := caller.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, req(hi)))

	type bulkDone struct {
		sum replay.BulkSummary
		err error
	}
	done := make(chan bulkDone, 1)
	go func() {
		sum, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: key, Reason: reason, Sources: listOf([]uuid.UUID{lo, hi}, 1)}, nil)
		done <- bulkDone{sum, err}
	}()
	testdb.WaitFor(t, "the chunk to wait for the caller's source", func() bool {
		return testdb.Scalar[bool](t, admin, `
			SELECT EXISTS (SELECT 1 FROM (`+testdb.WaitersSQL()+`) w JOIN pg_stat_activity a USING (pid)
			               WHERE a.application_name = 'bulk-deadlock')`)
	})
	_, err = replay.SucceededJobTx(ctx, tx, req(lo))
	if testdb.Citus() && err == nil {
		// On Citus the cycle closes on the tenant's worker node, whose
		// detector does not see the caller's deadlock_timeout: it may abort
		// the chunk, which runs again once the caller has committed.
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-done
		if got.err != nil || got.sum != (replay.BulkSummary{Selected: 2, Existing: 2}) {
			t.Fatalf("the bulk whose chunk was aborted: %+v, %v; want both existing", got.sum, got.err)
		}
		return
	}
	var pgErr *pgconn.PgError
	if !errors.Is(err, runledger.CodeTransient) || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
		t.Fatalf("the caller's second replay: %s, want a deadlock (40P01, db.transient)", testdb.Detail(err))
	}
	_ = tx.Rollback(ctx)
	got := <-done
	if got.err != nil || got.sum != (replay.BulkSummary{Selected: 2, Inserted: 2}) {
		t.Fatalf("the bulk beside the aborted caller: %+v, %v", got.sum, got.err)
	}
	assertReplayedOnce(t, admin, key, ids)
}
