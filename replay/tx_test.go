package replay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

func TestCallerTransactionRolledBackLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inTx := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, req))
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Fatalf("%d jobs after rollback", n)
	}
	if n := testdb.Count(t, pool, "job_events") + testdb.Count(t, pool, "job_replays"); n != 0 {
		t.Fatalf("%d events and lineage rows after rollback", n)
	}
	again := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	if again.Disposition != runledger.DispositionInserted || again.Replay.JobID == inTx.Replay.JobID {
		t.Fatalf("after rollback the same key gave %+v (rolled back id %s)", again, inTx.Replay.JobID)
	}
}

func TestCallerTransactionCommitsWithTheCallersOwnWrites(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.Exec(t, pool, `CREATE TABLE app_audit (replay_job_id uuid PRIMARY KEY, note text NOT NULL)`)
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, req))
	testdb.Exec(t, tx, `INSERT INTO app_audit VALUES ($1, 'replayed by support')`, got.Replay.JobID)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM app_audit a JOIN job_replays r USING (replay_job_id)`); n != 1 {
		t.Fatal("audit row and lineage did not commit together")
	}
	again := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	if again.Disposition != runledger.DispositionExisting || again.Replay.JobID != got.Replay.JobID {
		t.Fatalf("pool retry %+v", again)
	}
}

func TestCallerTransactionMustBeReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		// Validation comes first, then the isolation check.
		_, err = replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: " ", Reason: "r"})
		testdb.WantCode(t, err, "job.replay_request_key_blank")
		_, err = replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
		e := testdb.WantCode(t, err, runledger.CodeReplayUnsupportedIsolation)
		if !errors.Is(err, runledger.CodeReplayUnsupportedIsolation) || e.Category != runledger.CategoryValidation ||
			!strings.Contains(e.Detail, strings.ToLower(string(level))) {
			t.Fatalf("%s: %+v", level, e)
		}
		_ = tx.Rollback(ctx)
	}
	for _, level := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.ReadUncommitted} {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"}); err != nil {
			t.Fatalf("%s refused: %v", level, err)
		}
		_ = tx.Rollback(ctx)
	}
}

// A read-only caller transaction is refused with the isolation code, in
// the one round trip of the replay's statements: the lookup's locking read
// is refused by the server (SQLSTATE 25006), which aborts the caller's
// transaction, and nothing is written. A SERIALIZABLE READ ONLY
// DEFERRABLE one is refused the same way (with no concurrent serializable
// writer its safe snapshot comes at once).
func TestCallerTransactionMustBeReadWrite(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	for _, opts := range []pgx.TxOptions{
		{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly},
		{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadOnly, DeferrableMode: pgx.Deferrable},
	} {
		tx, err := pool.BeginTx(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
		e := testdb.WantCode(t, err, runledger.CodeReplayUnsupportedIsolation)
		if e.Category != runledger.CategoryValidation || !strings.Contains(e.Detail, "read-only") || !strings.Contains(e.Detail, "roll it back") {
			t.Fatalf("%+v: %+v", opts, e)
		}
		// Aborted, as the refusal says: the caller must roll back.
		var pgErr *pgconn.PgError
		if _, err := tx.Exec(ctx, `SELECT 1`); !errors.As(err, &pgErr) || pgErr.Code != "25P02" {
			t.Fatalf("%+v: the caller's transaction after the refusal: %v, want 25P02 (aborted)", opts, err)
		}
		_ = tx.Rollback(ctx)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 0 {
		t.Fatalf("%d lineage rows after refused replays", n)
	}
}
