package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// soakTables makes the soak's job type and side-effect table in a fresh
// database.
func soakTables(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `CREATE TABLE soak_effects (job_id uuid NOT NULL, attempt int NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestCheckDuplicatesCountsByPhase builds each case checkDuplicates
// counts, with the ledger's own operations where they exist and test SQL
// for the faults they forbid, and reads the counts with no restart (all
// away from it) and with one that covers the whole test (all near it).
func TestCheckDuplicatesCountsByPhase(t *testing.T) {
	ctx := testdb.Context(t)
	url := testdb.NewURL(t)
	pool, err := openPool(ctx, url, "soak-test", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn := soakTables(t, ctx, url)
	began := time.Now()
	attempts := int32(5)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: workType, MaxAttempts: &attempts})

	enqueue := func(kind string) {
		t.Helper()
		payload, _ := json.Marshal(workPayload{Kind: kind})
		testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: workType, Payload: payload})
	}
	claim := func() lease.FailRequest {
		t.Helper()
		got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{WorkerID: "soak-runtime-1", Limit: 1})
		if len(got) != 1 {
			t.Fatalf("claimed %d jobs, want 1", len(got))
		}
		j := got[0]
		testdb.Exec(t, pool, `INSERT INTO soak_effects (job_id, attempt) VALUES ($1, $2)`, j.ID, j.Attempt)
		return lease.FailRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "soak-runtime-1",
			ErrorCode: "soak.test", RetryDelay: testdb.Ptr(time.Duration(0))}
	}
	fail := func(r lease.FailRequest) {
		t.Helper()
		if _, err := lease.Fail(ctx, pool, r); err != nil {
			t.Fatalf("Fail: %v", err)
		}
	}

	// 1. One attempt's side effect recorded twice.
	enqueue("ok")
	r := claim()
	testdb.Exec(t, pool, `INSERT INTO soak_effects (job_id, attempt) VALUES ($1, $2)`, r.JobID, r.Attempt)
	fail(lease.FailRequest{JobID: r.JobID, RunNumber: r.RunNumber, Attempt: r.Attempt, WorkerID: r.WorkerID, Terminal: true})
	// 2. A second attempt of a job whose first never ended: the lease
	// dropped by test SQL, with no event.
	enqueue("ok")
	r = claim()
	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'PENDING', lease_expires_at = NULL, worker_id = NULL WHERE id = $1`, r.JobID)
	r = claim()
	fail(lease.FailRequest{JobID: r.JobID, RunNumber: r.RunNumber, Attempt: r.Attempt, WorkerID: r.WorkerID, Terminal: true})
	// 3. A retry the ok kind did not ask for (RETRYABLE), then its second
	// attempt: explained, not a duplicate.
	enqueue("ok")
	r = claim()
	fail(r)
	r = claim()
	fail(lease.FailRequest{JobID: r.JobID, RunNumber: r.RunNumber, Attempt: r.Attempt, WorkerID: r.WorkerID, Terminal: true})
	// 4. The retry kind's planned retry: counted nowhere.
	enqueue("retry")
	r = claim()
	fail(r)
	r = claim()
	fail(lease.FailRequest{JobID: r.JobID, RunNumber: r.RunNumber, Attempt: r.Attempt, WorkerID: r.WorkerID, Terminal: true})

	// 5. A job on its last attempt whose lease ran out (expired by test
	// SQL), dead-lettered by recovery.
	payload, _ := json.Marshal(workPayload{Kind: "ok"})
	testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: workType, Payload: payload, MaxAttempts: testdb.Ptr(int32(1))})
	r = claim()
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, r.JobID)
	if got, err := lease.RecoverExpiredLeases(ctx, pool, 10); err != nil || len(got) != 1 {
		t.Fatalf("RecoverExpiredLeases: %d jobs, %v; want 1", len(got), err)
	}

	st := newStats()
	st.start = began
	w := newWatch(config{window: time.Second, workers: 1}, st)
	d := checkDuplicates(ctx, conn, w)
	if d.err != nil {
		t.Fatal(d.err)
	}
	if d.twice != (dupCount{away: 1}) || d.unended != (dupCount{away: 1}) {
		t.Errorf("no restart: twice %+v, unended %+v; want one of each away", d.twice, d.unended)
	}
	if len(d.unplanned) != 2 || d.unplanned["RETRYABLE"] == nil || *d.unplanned["RETRYABLE"] != (dupCount{away: 1}) ||
		d.unplanned[recoveryDeadLetter] == nil || *d.unplanned[recoveryDeadLetter] != (dupCount{away: 1}) {
		t.Errorf("no restart: unplanned %v, want RETRYABLE and %s 1 away each", d.unplanned, recoveryDeadLetter)
	}
	rep := &report{dups: d, rt: &runtimeLoad{logs: newLogWatch()}}
	rep.judgeRuntime(st)
	if joined := strings.Join(rep.failures, "\n"); !strings.Contains(joined, "dead-lettered by lease recovery away from the restart") {
		t.Errorf("failures %q lack the recovery dead-letter", joined)
	}

	st.setRestart(began.Add(-time.Minute), time.Now())
	d = checkDuplicates(ctx, conn, w)
	if d.err != nil {
		t.Fatal(d.err)
	}
	if d.twice != (dupCount{near: 1}) || d.unended != (dupCount{near: 1}) {
		t.Errorf("restart around the test: twice %+v, unended %+v; want one of each near", d.twice, d.unended)
	}
	if c := d.unplanned[recoveryDeadLetter]; c == nil || *c != (dupCount{near: 1}) {
		t.Errorf("restart around the test: %s %v, want 1 near", recoveryDeadLetter, c)
	}
}

// TestWatchSeesLeasesOverConcurrencyAndDeadlocks holds two leases for a
// worker of Concurrency 1 and causes one real deadlock, and expects the
// watch to see both and the soak's judgement to fail on each.
func TestWatchSeesLeasesOverConcurrencyAndDeadlocks(t *testing.T) {
	ctx := testdb.Context(t)
	url := testdb.NewURL(t)
	pool, err := openPool(ctx, url, "soak-test", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: workType})
	for range 2 {
		testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: workType})
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{WorkerID: "soak-runtime-1", Limit: 2}); len(got) != 2 {
		t.Fatalf("claimed %d jobs, want 2", len(got))
	}

	st := newStats()
	st.start = time.Now()
	cfg := config{workers: 1, workerConcurrency: 1, window: time.Second, leaseSample: time.Second}
	w := newWatch(cfg, st)
	w.read(ctx, pool)
	if w.failed != 0 || w.over != 1 || w.maxAway["soak-runtime-1"] != 2 || w.deadlocks != 0 {
		t.Fatalf("watch after two leases: failed %d, over %d, max %v, deadlocks %d; want 0, 1, 2, 0", w.failed, w.over, w.maxAway, w.deadlocks)
	}

	// A deadlock: a and b each lock one row, then a waits for b's (seen
	// in pg_locks) and b asks for a's.
	testdb.Exec(t, pool, `CREATE TABLE dl (id int PRIMARY KEY); INSERT INTO dl VALUES (1), (2)`)
	a, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(ctx)
	b, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback(ctx)
	var aPID int
	if err := a.QueryRow(ctx, `UPDATE dl SET id = id WHERE id = 1 RETURNING pg_backend_pid()`).Scan(&aPID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, `UPDATE dl SET id = id WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Exec(ctx, `UPDATE dl SET id = id WHERE id = 2`)
		aDone <- err
	}()
	for waiting := false; !waiting; {
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, aPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	_, bErr := b.Exec(ctx, `UPDATE dl SET id = id WHERE id = 1`)
	aErr := <-aDone
	var pgErr *pgconn.PgError
	if !(errors.As(bErr, &pgErr) && pgErr.Code == "40P01") && !(errors.As(aErr, &pgErr) && pgErr.Code == "40P01") {
		t.Fatalf("no deadlock reported: a %v, b %v", aErr, bErr)
	}
	_ = a.Rollback(ctx)
	_ = b.Rollback(ctx)
	// The counter reaches pg_stat_database once the backends flush their
	// statistics: read until it has moved, within a bound.
	for deadline := time.Now().Add(30 * time.Second); w.deadlocks == 0 && time.Now().Before(deadline); {
		w.read(ctx, pool)
	}
	if w.deadlocks != 1 {
		t.Fatalf("deadlocks %d, want 1", w.deadlocks)
	}

	rep := &report{cfg: cfg, watch: w, rt: &runtimeLoad{logs: newLogWatch()}}
	rep.judgeRuntime(st)
	joined := strings.Join(rep.failures, "\n")
	for _, want := range []string{"over its Concurrency 1", "1 deadlocks on the server"} {
		if !strings.Contains(joined, want) {
			t.Errorf("failures %q lack %q", joined, want)
		}
	}
}

// TestJudgeFailsOnDuplicatesAwayFromTheRestart: duplicates near the
// restart are reported only; away from it they fail the soak.
func TestJudgeFailsOnDuplicatesAwayFromTheRestart(t *testing.T) {
	for _, c := range []struct {
		d    duplicates
		fail bool
	}{
		{duplicates{twice: dupCount{near: 3}, unended: dupCount{near: 2}}, false},
		{duplicates{twice: dupCount{away: 1}}, true},
		{duplicates{unended: dupCount{away: 1}}, true},
	} {
		rep := &report{dups: c.d, rt: &runtimeLoad{logs: newLogWatch()}}
		rep.judgeRuntime(newStats())
		if got := strings.Contains(strings.Join(rep.failures, "\n"), "duplicate attempts away from the restart"); got != c.fail {
			t.Errorf("%+v: failed %v, want %v (%q)", c.d, got, c.fail, rep.failures)
		}
	}
}
