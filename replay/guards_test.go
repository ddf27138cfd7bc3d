package replay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// tuplesRead returns how many rows of table this backend has fetched or
// scanned and not yet reported (the current transaction's, plus earlier
// ones' not flushed yet): compare two readings in one transaction.
func tuplesRead(t *testing.T, tx pgx.Tx, table string) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, tx, `
		SELECT coalesce(sum(coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE relname = $1`, table)
}

// A lineage hit turns off everything after the first lookup: in the
// caller's transaction the source stays unlocked, the job type's definition
// is neither read nor locked, and nothing is inserted, for a matching
// reason (Existing) and another one (the conflict).
func TestLookupHitLocksNothingMore(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	jobs := testdb.Count(t, pool, "job_queue")

	for _, reason := range []string{"r", "other"} {
		tx, _ := beginTx(t, ctx, pool)
		defsBefore := tuplesRead(t, tx, "job_definitions")
		out, err := replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: reason})
		if reason == "r" {
			if r := testdb.MustReplayed(t)(out, err); r.Disposition != runledger.DispositionExisting || r.Replay.JobID != first.Replay.JobID {
				t.Fatalf("reason %q: %+v", reason, r)
			}
		} else if !errors.Is(err, runledger.CodeReplayIdempotencyConflict) {
			t.Fatalf("reason %q: %T %v, want the conflict", reason, out, err)
		}
		if n := tuplesRead(t, tx, "job_definitions") - defsBefore; n != 0 {
			t.Errorf("reason %q: the definition was read (%d rows): the insert ran", reason, n)
		}
		if locks := probeRowLocks(t, pool, sourceID); !locks.unlocked() {
			t.Errorf("reason %q: source locked %+v after a lineage hit", reason, locks)
		}
		if n := testdb.Count(t, tx, "job_queue"); n != jobs {
			t.Errorf("reason %q: %d jobs, want %d", reason, n, jobs)
		}
		_ = tx.Rollback(ctx)
	}
}

// A lock miss turns off the second lookup and the insert: a mismatch and a
// NotFound in the caller's transaction read no definition, lock nothing and
// write nothing.
func TestLockMissInsertsNothing(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	jobs := testdb.Count(t, pool, "job_queue")

	for _, req := range []replay.Request{
		{SourceJobID: sourceID, ExpectedRunNumber: 2, Key: "k", Reason: "r"},
		{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"},
	} {
		tx, _ := beginTx(t, ctx, pool)
		defsBefore, lineageBefore := tuplesRead(t, tx, "job_definitions"), tuplesRead(t, tx, "job_replays")
		out, err := replay.SucceededJobTx(ctx, tx, req)
		switch out.(type) {
		case replay.ExpectationMismatch, replay.NotFound:
		default:
			t.Fatalf("outcome %T %v", out, err)
		}
		if n := tuplesRead(t, tx, "job_definitions") - defsBefore; n != 0 {
			t.Errorf("%T: the definition was read (%d rows): the insert ran", out, n)
		}
		if n := tuplesRead(t, tx, "job_replays") - lineageBefore; n != 0 {
			t.Errorf("%T: job_replays read %d rows", out, n)
		}
		if n := testdb.Count(t, tx, "job_queue") + testdb.Count(t, tx, "job_events") + testdb.Count(t, tx, "job_replays"); n != jobs {
			t.Errorf("%T: rows written", out)
		}
		if locks := probeRowLocks(t, pool, sourceID); !locks.unlocked() {
			t.Errorf("%T: source locked %+v", out, locks)
		}
		_ = tx.Rollback(ctx)
	}
}

// A second-lookup hit turns off the insert: a replay that waits for the
// source lock while the holder commits its own replay under the same key
// finds that replay after the lock and inserts nothing, in one round trip.
func TestSecondLookupHitInsertsNothing(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.OpenPool(t, testdb.NewURL(t), 4, nil)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}

	holder, _ := beginTx(t, ctx, pool)
	held := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, holder, req))

	waiter, _ := beginTx(t, ctx, pool)
	defsBefore := tuplesRead(t, waiter, "job_definitions")
	type result struct {
		out replay.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := replay.SucceededJobTx(ctx, waiter, req)
		done <- result{out, err}
	}()
	testdb.WaitBlocked(t, pool, waiter.Conn().PgConn().PID())
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	r := testdb.MustReplayed(t)(got.out, got.err)
	if r.Disposition != runledger.DispositionExisting || r.Replay.JobID != held.Replay.JobID {
		t.Fatalf("waiter: %+v, want the holder's replay as existing", r)
	}
	if n := tuplesRead(t, waiter, "job_definitions") - defsBefore; n != 0 {
		t.Errorf("the waiter read the definition (%d rows): its insert ran", n)
	}
	if n := testdb.Count(t, waiter, "job_replays"); n != 1 {
		t.Errorf("%d lineage rows", n)
	}
	_ = waiter.Rollback(ctx)
}

// A context canceled while the source lock waits is answered by the server
// (57014, after the cancel request the session sends): transient, wrapping
// ctx's error, with nothing written, although COMMIT was in the same batch.
func TestLockWaitCancelIsTheServersAnswer(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.OpenPool(t, testdb.NewURL(t), 4, nil)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))

	holder, _ := beginTx(t, ctx, pool)
	testdb.LockJob(t, holder, sourceID, "UPDATE")
	for _, owned := range []bool{true, false} {
		callCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		var pid uint32
		req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
		if owned {
			go func() { _, err := replay.SucceededJob(callCtx, pool, req); done <- err }()
		} else {
			tx, _ := beginTx(t, ctx, pool)
			pid = tx.Conn().PgConn().PID()
			go func() { _, err := replay.SucceededJobTx(callCtx, tx, req); done <- err }()
		}
		testdb.WaitFor(t, "the replay to wait for the source lock", func() bool {
			return testdb.Scalar[int64](t, pool, `
				SELECT count(*) FROM (`+testdb.WaitersSQL()+`) w WHERE pid <> $1 AND pid <> pg_backend_pid()`,
				int32(holder.Conn().PgConn().PID())) > 0
		})
		cancel()
		err := <-done
		var e *runledger.Error
		if !errors.As(err, &e) || !errors.Is(err, context.Canceled) || e.Category != runledger.CategoryTransient {
			t.Fatalf("owned=%v: err %v, want transient wrapping context.Canceled", owned, err)
		}
		if errors.Is(err, runledger.ErrCommitUnconfirmed) {
			t.Fatalf("owned=%v: %v is commit-unconfirmed", owned, err)
		}
		if e.SQLState != "57014" {
			t.Errorf("owned=%v: SQLSTATE %q, want the server's 57014", owned, e.SQLState)
		}
		if !owned {
			// The caller's connection is still usable for its ROLLBACK.
			testdb.WaitFor(t, "the canceled statement to end", func() bool {
				return testdb.Scalar[int64](t, pool, `SELECT count(*) FROM (`+testdb.WaitersSQL()+`) w WHERE pid = $1`, int32(pid)) == 0
			})
		}
	}
	_ = holder.Rollback(ctx)
	if n := testdb.Count(t, pool, "job_replays") + testdb.Count(t, pool, "job_events"); n != 0 {
		t.Fatal("a canceled replay wrote lineage or events")
	}
}
