package replay_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// Semantics of the pipelined statements: what rides in a round trip with
// something else must not read, lock or commit what the one-statement-per-
// round-trip protocol would not have.

// Under a refused isolation level the combined probe and lookup matches no
// lineage, so it locks no row, even one the same request under READ
// COMMITTED would lock (the replay of a matching lineage row).
func TestRefusedIsolationLocksNoRow(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))

	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		_, err = replay.SucceededJobTx(ctx, tx, req)
		if !errors.Is(err, runledger.CodeReplayUnsupportedIsolation) {
			t.Fatalf("%s: %v, want the isolation refusal", level, err)
		}
		for _, id := range []uuid.UUID{first.Replay.JobID, sourceID} {
			if locks := probeRowLocks(t, pool, id); !locks.unlocked() {
				t.Fatalf("%s: job %s locked %+v by a refused request", level, id, locks)
			}
		}
		_ = tx.Rollback(ctx)
	}
}

// Lineage committed after the first lookup is found by the second one,
// whatever the source lock found: here a replay of run 1 under the
// request's key is committed between the lookup and the lock, and the
// source moves to another run. The lock misses and takes nothing, and the
// outcome is that replay, Existing and locked, as a retry a moment later
// would report it (the lineage decides before the source's state does);
// the source stays unlocked in the caller's open transaction.
func TestLineageCommittedAfterTheLookupIsFoundAfterALockMiss(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	replayID := uuid.Must(uuid.NewV7())

	defer failpoint.Enable(replay.FailpointAfterLookup, onSource(sourceID, func(int) {
		// Another connection: a replay of run 1 under this key, then the
		// source is re-run.
		testdb.Exec(t, pool, `INSERT INTO job_queue (id, job_type, max_attempts) VALUES ($1, 'email', 5)`, replayID)
		testdb.Exec(t, pool, `INSERT INTO job_replays (source_job_id, source_run_number, replay_request_key, replay_job_id, reason)
			VALUES ($1, 1, 'k', $2, 'r')`, sourceID, replayID)
		testdb.Exec(t, pool, `UPDATE job_queue SET run_number = 2 WHERE id = $1`, sourceID)
	}))()

	tx, _ := beginTx(t, ctx, pool)
	got := testdb.MustReplayed(t)(replay.SucceededJobTx(ctx, tx, req))
	if got.Disposition != runledger.DispositionExisting || got.Replay.JobID != replayID {
		t.Fatalf("outcome %+v, want the replay committed meanwhile, existing", got)
	}
	if locks := probeRowLocks(t, pool, sourceID); !locks.unlocked() {
		t.Fatalf("source locked %+v after a missed source lock", locks)
	}
	if locks := probeRowLocks(t, pool, replayID); !locks.heldNoKeyUpdate() {
		t.Fatalf("existing replay locked %+v, want FOR NO KEY UPDATE", locks)
	}
	_ = tx.Rollback(ctx)
}

// An error the server reports for the insert stops the batch before its
// COMMIT: the call returns the insert's classified error, nothing is
// written, and the connection, rolled back, goes back to the pool rather
// than being destroyed.
func TestInsertErrorInTheFinalBatchRollsBackAndKeepsTheConnection(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.OpenPool(t, testdb.NewURL(t), 1, nil)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.Exec(t, pool, `ALTER TABLE job_replays ADD CONSTRAINT test_refused CHECK (replay_request_key <> 'refused')`)
	conns := pool.Stat().NewConnsCount()

	_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "refused", Reason: "r"})
	if e := testdb.WantCode(t, err, "db.business_rule_violation"); e.Constraint != "test_refused" || errors.Is(err, runledger.ErrCommitUnconfirmed) {
		t.Fatalf("%+v", e)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Fatalf("%d jobs: the refused insert was committed", n)
	}
	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "accepted", Reason: "r"}))
	if got.Disposition != runledger.DispositionInserted {
		t.Fatalf("%+v", got)
	}
	if n := pool.Stat().NewConnsCount(); n != conns {
		t.Fatalf("%d connections opened after the failed call, want the same one reused", n-conns)
	}
}

// A COMMIT that fails after the insert succeeded, in the same batch, is
// commit-unconfirmed, not the insert's error. A deferred constraint
// trigger refuses the lineage at COMMIT here, so the transaction rolls
// back and nothing is written.
func TestCommitErrorInTheFinalBatchIsCommitUnconfirmed(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	if testdb.Citus() {
		t.Skip("Citus refuses triggers on distributed tables; the commit error is made by a deferred trigger")
	}
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.Exec(t, pool, `CREATE FUNCTION test_refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$`)
	testdb.Exec(t, pool, `CREATE CONSTRAINT TRIGGER test_refuse_at_commit AFTER INSERT ON job_replays
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_refuse_at_commit()`)

	_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if !errors.Is(err, runledger.ErrCommitUnconfirmed) || runledger.CodeOf(err) != runledger.ErrCommitUnconfirmed {
		t.Fatalf("err %v, want commit-unconfirmed", err)
	}
	if e := testdb.WantCode(t, err, runledger.ErrCommitUnconfirmed); e.SQLState != "P0001" {
		t.Fatalf("%+v: want the COMMIT's SQLSTATE", e)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Fatalf("%d jobs after a refused COMMIT", n)
	}
}

// A context that ends before the last batch is sent: nothing was sent, so
// this is not a failed COMMIT; the transaction is rolled back and the error
// wraps the context's.
func TestContextDoneBeforeTheFinalBatchRollsBack(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	// The call runs on a pool of one connection, to see it come back.
	callPool := testdb.OpenPool(t, pool.Config().ConnString(), 1, nil)
	pidOf := func() uint32 {
		c, err := callPool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		return c.Conn().PgConn().PID()
	}
	before := pidOf()
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer failpoint.Enable(replay.FailpointAfterSourceLock, onSource(sourceID, func(int) { cancel() }))()

	_, err := replay.SucceededJob(callCtx, callPool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if !errors.Is(err, context.Canceled) || errors.Is(err, runledger.ErrCommitUnconfirmed) || runledger.CategoryOf(err) != runledger.CategoryTransient {
		t.Fatalf("err %v, want a transient error wrapping context.Canceled", err)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Fatalf("%d jobs", n)
	}
	// Nothing of the rest was sent, so the call rolled back on its
	// connection before returning: the lock is gone and the connection,
	// sound, went back to the pool.
	if locks := probeRowLocks(t, pool, sourceID); !locks.unlocked() {
		t.Fatalf("source still locked after the call returned: %+v", locks)
	}
	if after := pidOf(); after != before {
		t.Fatalf("the connection was replaced (backend %d, then %d), not rolled back and reused", before, after)
	}
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
}

// The mismatch outcome's actual job is decoded from the classification
// read's single JSON column; it equals, field for field and byte for byte,
// the job as the library reads it column by column, with every field set
// (timestamps, progress, JSON documents, keys) or NULL.
func TestMismatchActualEqualsTheJobAsRead(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := uuid.New()
	s := testdb.Succeeded(runledger.Organization(org))
	key, resource := "idem-1", "printer-9"
	s.IdempotencyKey, s.ResourceKey = &key, &resource
	full := testdb.Seed(t, pool, s)
	testdb.Exec(t, pool, `UPDATE job_queue SET status_reason = 'why', last_error_code = 'E1', last_error_message = 'boom',
		lease_expires_at = now() + interval '1 minute', last_heartbeat_at = now(), progress_done = 3, progress_total = 7,
		checkpoint = '{"c":[1,{"d":null}]}', output = '"text"' WHERE id = $1`, full)
	bare := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.Exec(t, pool, `UPDATE job_queue SET checkpoint = NULL, output = NULL, worker_id = NULL, started_at = NULL,
		finished_at = NULL, progress_done = NULL, progress_total = NULL WHERE id = $1`, bare)

	for _, c := range []struct {
		id    uuid.UUID
		scope runledger.Scope
	}{{full, runledger.Organization(org)}, {bare, runledger.Global()}} {
		out, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: c.scope, SourceJobID: c.id, ExpectedRunNumber: 5, Key: "k", Reason: "r"})
		m, ok := out.(replay.ExpectationMismatch)
		if err != nil || !ok {
			t.Fatalf("outcome %T %v", out, err)
		}
		row, err := db.New().JobGetByID(ctx, pool, db.JobGetByIDParams{ID: c.id, OrganizationID: rows.Tenant(c.scope)})
		if err != nil {
			t.Fatal(err)
		}
		want, err := rows.Job(row)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m.Actual, want) {
			t.Fatalf("actual\n%+v\nwant\n%+v", m.Actual, want)
		}
	}
}

// The mismatch's actual job is right whatever the session's TimeZone, for
// any year from 1 to 9999: zones with historic offsets in seconds (New
// York before 1883 is -04:56:02) and dates a zone moves past year 9999.
func TestMismatchActualJobInAnySessionTimeZone(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	for _, zone := range []string{"America/New_York", "Asia/Kolkata"} {
		pool := testdb.OpenPool(t, testdb.NewURL(t), 2, map[string]string{"timezone": zone})
		for _, at := range []string{"1850-01-01 00:00:00+00", "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999+00"} {
			id := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
			testdb.Exec(t, pool, `UPDATE job_queue SET next_run_at = $2::timestamptz, started_at = $2::timestamptz,
				lease_expires_at = $2::timestamptz WHERE id = $1`, id, at)
			out, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: id, ExpectedRunNumber: 2, Key: "k", Reason: "r"})
			m, ok := out.(replay.ExpectationMismatch)
			if err != nil || !ok {
				t.Fatalf("%s, %s: outcome %T %v", zone, at, out, err)
			}
			row, err := db.New().JobGetByID(ctx, pool, db.JobGetByIDParams{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			want, err := rows.Job(row)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m.Actual, want) {
				t.Fatalf("%s, %s: actual\n%+v\nwant\n%+v", zone, at, m.Actual, want)
			}
		}
	}
}
