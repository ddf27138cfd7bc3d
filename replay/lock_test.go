package replay_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/replay"
)

func beginTx(t *testing.T, ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}) (pgx.Tx, uint32) {
	t.Helper()
	tx := testdb.Begin(t, ctx, pool)
	return tx, tx.Conn().PgConn().PID()
}

func TestExistingOutcomeLocksTheReplayUntilTheTransactionEnds(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))

	tx, pid := beginTx(t, ctx, pool)
	got := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, req))
	if got.Disposition != runledger.DispositionExisting || got.Replay.Status != runledger.JobStatusPending || got.Replay.RunNumber != 1 {
		t.Fatalf("existing %+v", got)
	}
	if holders := rowLockHolders(t, pool, first.Replay.JobID); !reflect.DeepEqual(holders, []uint32{pid}) {
		t.Fatalf("replay row held by %v, want the replay transaction %d", holders, pid)
	}
	if locks := probeRowLocks(t, pool, first.Replay.JobID); !locks.heldNoKeyUpdate() {
		t.Fatalf("replay row locks %+v, want FOR NO KEY UPDATE", locks)
	}
	if locks := probeRowLocks(t, pool, sourceID); !locks.unlocked() {
		t.Fatalf("source locked %+v on the Existing path", locks)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if locks := probeRowLocks(t, pool, first.Replay.JobID); !locks.unlocked() {
		t.Fatalf("replay still locked after commit: %+v", locks)
	}
}

func TestConflictMismatchAndNotFoundHoldNoRowLock(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))

	cases := []struct {
		name string
		req  replay.Request
		want func(replay.Outcome, error) bool
	}{
		{"conflict", replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "other"},
			func(_ replay.Outcome, err error) bool { return errors.Is(err, runledger.CodeReplayIdempotencyConflict) }},
		{"mismatch", replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 2, Key: "k2", Reason: "r"},
			func(o replay.Outcome, err error) bool {
				_, ok := o.(replay.ExpectationMismatch)
				return err == nil && ok
			}},
		{"not found", replay.Request{Scope: runledger.Organization(uuid.New()), SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k3", Reason: "r"},
			func(o replay.Outcome, err error) bool { _, ok := o.(replay.NotFound); return err == nil && ok }},
	}
	for _, c := range cases {
		tx, _ := beginTx(t, ctx, pool)
		out, err := replay.SucceededJobTx(ctx, tx, c.req)
		if !c.want(out, err) {
			t.Fatalf("%s: outcome %v err %v", c.name, out, err)
		}
		for _, id := range []uuid.UUID{sourceID, first.Replay.JobID} {
			if locks := probeRowLocks(t, pool, id); !locks.unlocked() {
				t.Fatalf("%s: job %s locked %+v while the transaction is open", c.name, id, locks)
			}
		}
		_ = tx.Rollback(ctx)
	}
}

func TestInsertPathHoldsTheSourceAndDefinitionLocks(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))

	tx, pid := beginTx(t, ctx, pool)
	got := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	if got.Disposition != runledger.DispositionInserted {
		t.Fatalf("%+v", got)
	}
	if holders := rowLockHolders(t, pool, sourceID); !reflect.DeepEqual(holders, []uint32{pid}) {
		t.Fatalf("source held by %v, want %d", holders, pid)
	}
	if locks := probeRowLocks(t, pool, sourceID); !locks.heldNoKeyUpdate() {
		t.Fatalf("source locks %+v, want FOR NO KEY UPDATE (KEY SHARE still allowed)", locks)
	}
	// The definition is share-locked: readers and other sharers pass, a
	// writer waits.
	probeDef := func(mode string) bool {
		ptx, _ := beginTx(t, ctx, pool)
		defer ptx.Rollback(ctx) //nolint:errcheck
		_, err := ptx.Exec(ctx, `SELECT 1 FROM job_definitions WHERE job_type = 'email' `+mode+` NOWAIT`)
		return err != nil
	}
	var changed chan error
	if testdb.Citus() {
		// On Citus the share lock is on the reference table's placement on
		// the tenant's node, which a probe through the coordinator need not
		// reach; a definition change writes every placement, so it waits.
		changed = make(chan error, 1)
		go func() {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "email"})
			changed <- err
		}()
		testdb.WaitBlocked(t, pool, 0)
	} else if probeDef("FOR SHARE") || !probeDef("FOR UPDATE") {
		t.Fatal("job definition is not held FOR SHARE by the replay transaction")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if changed != nil {
		if err := <-changed; err != nil {
			t.Fatal(err)
		}
	}
	if locks := probeRowLocks(t, pool, sourceID); !locks.unlocked() {
		t.Fatalf("source still locked after commit: %+v", locks)
	}
}

// A request that waited for the source lock sees the lineage the lock holder
// committed: the same reason resolves to Existing, another reason to a
// conflict that keeps the source locked until the caller ends its
// transaction.
func TestWaiterOnTheSourceLockSeesTheHoldersLineage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, reason string
	}{{"same reason", "r"}, {"other reason", "other"}} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := testdb.Context(t)
			pool := testdb.New(t)
			sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))

			holder, _ := beginTx(t, ctx, pool)
			held := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, holder, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))

			waiter, waiterPID := beginTx(t, ctx, pool)
			type result struct {
				out replay.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := replay.SucceededJobTx(ctx, waiter, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: c.reason})
				done <- result{out, err}
			}()
			testdb.WaitBlocked(t, pool, waiterPID)
			if err := holder.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			res := <-done
			if c.reason == "r" {
				got := testdb.MustReplayed(t)(res.out, res.err)
				if got.Disposition != runledger.DispositionExisting || got.Replay.JobID != held.Replay.JobID {
					t.Fatalf("waiter got %+v, holder inserted %s", got, held.Replay.JobID)
				}
				if holders := rowLockHolders(t, pool, held.Replay.JobID); !reflect.DeepEqual(holders, []uint32{waiterPID}) {
					t.Fatalf("replay held by %v, want the waiter %d", holders, waiterPID)
				}
			} else if !errors.Is(res.err, runledger.CodeReplayIdempotencyConflict) {
				t.Fatalf("waiter got %v %v, want a conflict", res.out, res.err)
			}
			if holders := rowLockHolders(t, pool, sourceID); !reflect.DeepEqual(holders, []uint32{waiterPID}) {
				t.Fatalf("source held by %v, want the waiter %d until it ends", holders, waiterPID)
			}
			_ = waiter.Rollback(ctx)
			if n := testdb.Count(t, pool, "job_replays"); n != 1 {
				t.Fatalf("%d lineage rows", n)
			}
		})
	}
}

func TestContextCanceledWhileWaitingForTheSourceRollsBack(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.OpenPool(t, testdb.NewURL(t), 4, map[string]string{"application_name": "replay-cancel-test"})
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))

	// Another transaction holds the source.
	holder, _ := beginTx(t, ctx, pool)
	testdb.LockJob(t, holder, sourceID, "UPDATE")

	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := replay.SucceededJob(callCtx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
		done <- err
	}()
	// Find the replay's backend waiting on the lock, then cancel.
	var waiterPID int32
	testdb.WaitFor(t, "the replay to wait for the source lock", func() bool {
		waiterPID = testdb.Scalar[int32](t, pool, `
			SELECT coalesce(min(pid), 0) FROM (`+testdb.WaitersSQL()+`) w
			WHERE pid <> $1 AND pid <> pg_backend_pid()`,
			int32(holder.Conn().PgConn().PID()))
		return waiterPID != 0
	})
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want it to wrap context.Canceled", err)
	}
	if runledger.CategoryOf(err) != runledger.CategoryTransient {
		t.Fatalf("category %s", runledger.CategoryOf(err))
	}
	// Nothing remains of the canceled call: its backend stops waiting (the
	// cancel request pgx sent is handled by the server asynchronously, so
	// poll) while the holder still holds the source; then no rows, no locks.
	testdb.WaitFor(t, "the canceled backend to stop waiting", func() bool {
		return testdb.Scalar[int64](t, pool, `SELECT count(*) FROM pg_locks WHERE pid = $1`, waiterPID) == 0
	})
	_ = holder.Rollback(ctx)
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Fatalf("%d jobs", n)
	}
	if n := testdb.Count(t, pool, "job_replays") + testdb.Count(t, pool, "job_events"); n != 0 {
		t.Fatal("canceled replay wrote lineage or events")
	}
	if locks := probeRowLocks(t, pool, sourceID); !locks.unlocked() {
		t.Fatalf("source still locked: %+v", locks)
	}
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
}

// A mismatch found at once locks nothing; a mismatch found after waiting
// for the source lock keeps that lock until the transaction ends:
// PostgreSQL locks the row's newest version before it re-checks the
// conditions on it, and keeps the lock when the re-check fails. In the
// pool-owned form the transaction commits at once, so the lock ends with
// the call; in a caller's transaction it lasts until the caller ends its
// transaction, as the package documentation states.
func TestMismatchAfterTheLockWaitKeepsTheSourceLocked(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}

	// A holder changes the source (a new run), and the waiter's locking
	// read waits for it.
	holder, _ := beginTx(t, ctx, pool)
	testdb.Exec(t, holder, `UPDATE job_queue SET run_number = 2 WHERE id = $1`, sourceID)
	waiter, waiterPID := beginTx(t, ctx, pool)
	type result struct {
		out replay.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := replay.SucceededJobTx(ctx, waiter, req)
		done <- result{out, err}
	}()
	testdb.WaitBlocked(t, pool, waiterPID)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if m, ok := res.out.(replay.ExpectationMismatch); res.err != nil || !ok || m.Actual.RunNumber != 2 {
		t.Fatalf("waiter got %T %+v %v, want a mismatch at run 2", res.out, res.out, res.err)
	}
	if holders := rowLockHolders(t, pool, sourceID); !reflect.DeepEqual(holders, []uint32{waiterPID}) {
		t.Fatalf("source held by %v, want the waiter %d until it ends", holders, waiterPID)
	}
	_ = waiter.Rollback(ctx)

	// The same request now mismatches at once and locks nothing.
	tx, _ := beginTx(t, ctx, pool)
	defer func() { _ = tx.Rollback(ctx) }()
	if out, err := replay.SucceededJobTx(ctx, tx, req); err != nil {
		t.Fatal(err)
	} else if _, ok := out.(replay.ExpectationMismatch); !ok {
		t.Fatalf("got %T, want a mismatch", out)
	}
	if holders := rowLockHolders(t, pool, sourceID); len(holders) != 0 {
		t.Fatalf("an immediate mismatch left the source locked by %v", holders)
	}
}
