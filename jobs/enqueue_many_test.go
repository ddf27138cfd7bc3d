package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// countJobs counts the jobs and the ENQUEUED events of the database.
func countJobs(t *testing.T, pool *pgxpool.Pool) (jobsN, events int) {
	t.Helper()
	ctx := testdb.Context(t)
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_queue),
		(SELECT count(*) FROM job_events WHERE event_type = 'ENQUEUED')`).Scan(&jobsN, &events); err != nil {
		t.Fatal(err)
	}
	return jobsN, events
}

func wantCode(t *testing.T, r jobs.EnqueueManyResult, code runledger.Code) {
	t.Helper()
	var e *runledger.Error
	if !errors.As(r.Err, &e) || e.Code != code {
		t.Fatalf("result %+v, want error %s", r, code)
	}
}

func wantDisposition(t *testing.T, r jobs.EnqueueManyResult, d runledger.Disposition) {
	t.Helper()
	if r.Err != nil || r.Disposition != d {
		t.Fatalf("result %+v (err %v), want %s", r, r.Err, d)
	}
}

func TestEnqueueManyResultsInInputOrder(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "off", Enabled: testdb.Ptr(false)})
	org := runledger.Organization(uuid.New())
	later := time.Now().Add(time.Hour)
	reqs := []jobs.EnqueueRequest{
		{JobType: "email", Payload: json.RawMessage(`{"n":1}`)}, // 0 inserted
		{JobType: " "},                        // 1 invalid
		{JobType: "missing"},                  // 2 definition unavailable
		{JobType: "off", IdempotencyKey: "k"}, // 3 definition unavailable
		{JobType: "email", IdempotencyKey: "a", Payload: json.RawMessage(`{"x":1}`)},                    // 4 inserted
		{JobType: "email", IdempotencyKey: "a", Payload: json.RawMessage(`{ "x" : 1 }`)},                // 5 existing (4)
		{JobType: "email", IdempotencyKey: "a", Payload: json.RawMessage(`{"x":2}`)},                    // 6 conflict
		{JobType: "email", Scope: org, IdempotencyKey: "a", Priority: testdb.Ptr[int32](-5)},            // 7 inserted, own tenant
		{JobType: "email", RunAt: &later, MaxAttempts: testdb.Ptr[int32](2), ExecutionResourceKey: "r"}, // 8 inserted, scheduled
		{JobType: "email", MaxAttempts: testdb.Ptr[int32](0)},                                           // 9 invalid
	}
	res, err := jobs.EnqueueMany(ctx, pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(res), len(reqs))
	}
	wantDisposition(t, res[0], runledger.DispositionInserted)
	wantCode(t, res[1], "job.job_type_blank")
	wantCode(t, res[2], runledger.CodeDefinitionNotFoundOrDisabled)
	wantCode(t, res[3], runledger.CodeDefinitionNotFoundOrDisabled)
	wantDisposition(t, res[4], runledger.DispositionInserted)
	wantDisposition(t, res[5], runledger.DispositionExisting)
	if res[5].Job.ID != res[4].Job.ID {
		t.Fatalf("repeated request in the batch found %s, want %s", res[5].Job.ID, res[4].Job.ID)
	}
	wantCode(t, res[6], runledger.CodeIdempotencyConflict)
	wantDisposition(t, res[7], runledger.DispositionInserted)
	if res[7].Job.ID == res[4].Job.ID || res[7].Job.Priority != -5 || res[7].Job.Scope() != org {
		t.Fatalf("other tenant's keyed job %+v", res[7].Job)
	}
	wantDisposition(t, res[8], runledger.DispositionInserted)
	if j := res[8].Job; j.Stage != "scheduled" || j.MaxAttempts != 2 || j.ExecutionResourceKey == nil || *j.ExecutionResourceKey != "r" {
		t.Fatalf("scheduled job %+v", j)
	}
	if j := res[0].Job; j.Stage != "queued" || j.MaxAttempts != 8 || j.Priority != 100 || j.Status != runledger.JobStatusPending {
		t.Fatalf("defaults not applied: %+v", j)
	}
	wantCode(t, res[9], "job.max_attempts_invalid")
	if n, ev := countJobs(t, pool); n != 4 || ev != 4 {
		t.Fatalf("%d jobs and %d ENQUEUED events, want 4 and 4", n, ev)
	}

	// The same batch again: every keyed request finds its job, the
	// unkeyed ones insert anew.
	again, err := jobs.EnqueueMany(ctx, pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	wantDisposition(t, again[4], runledger.DispositionExisting)
	wantDisposition(t, again[7], runledger.DispositionExisting)
	if again[4].Job.ID != res[4].Job.ID || again[7].Job.ID != res[7].Job.ID {
		t.Fatal("a retried keyed request found another job")
	}
	wantCode(t, again[6], runledger.CodeIdempotencyConflict)
	wantDisposition(t, again[0], runledger.DispositionInserted)
	if n, _ := countJobs(t, pool); n != 6 {
		t.Fatalf("%d jobs after the retry, want 6", n)
	}
}

func TestEnqueueManyChosenIDs(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	id := uuid.Must(uuid.NewV7())
	req := jobs.EnqueueRequest{JobType: "email", JobID: id}
	res, err := jobs.EnqueueMany(ctx, pool, []jobs.EnqueueRequest{req, req, {JobType: "email", JobID: id, Payload: json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	wantDisposition(t, res[0], runledger.DispositionInserted)
	wantDisposition(t, res[1], runledger.DispositionExisting)
	wantCode(t, res[2], runledger.CodeIdempotencyConflict)
	if res[0].Job.ID != id || res[1].Job.ID != id {
		t.Fatalf("chosen id not kept: %s %s", res[0].Job.ID, res[1].Job.ID)
	}
}

func TestEnqueueManyRefusesTooManyRequests(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	reqs := make([]jobs.EnqueueRequest, jobs.MaxEnqueueMany+1)
	for i := range reqs {
		reqs[i] = jobs.EnqueueRequest{JobType: "email"}
	}
	_, err := jobs.EnqueueMany(ctx, pool, reqs)
	testdb.WantCode(t, err, "job.enqueue_many_too_large")
	res, err := jobs.EnqueueMany(ctx, pool, reqs[1:])
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Disposition != runledger.DispositionInserted {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if n, ev := countJobs(t, pool); n != jobs.MaxEnqueueMany || ev != jobs.MaxEnqueueMany {
		t.Fatalf("%d jobs, %d events after a full batch", n, ev)
	}
}

func TestEnqueueManyTxRefusesRepeatableReadWhenKeyed(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = jobs.EnqueueManyTx(ctx, tx, []jobs.EnqueueRequest{{JobType: "email", IdempotencyKey: "k"}})
	testdb.WantCode(t, err, runledger.CodeEnqueueUnsupportedIsolation)
	res, err := jobs.EnqueueManyTx(ctx, tx, []jobs.EnqueueRequest{{JobType: "email"}})
	if err != nil {
		t.Fatal(err)
	}
	wantDisposition(t, res[0], runledger.DispositionInserted)
}

// Two batches with overlapping keys on two connections: the second waits
// for the first's uncommitted keys, then finds its jobs as a keyed
// Enqueue does (same request: existing; another request: conflict).
func TestEnqueueManyConcurrentBatchesOverlappingKeys(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	tx := testdb.Begin(t, ctx, pool)
	first, err := jobs.EnqueueManyTx(ctx, tx, []jobs.EnqueueRequest{
		{JobType: "email", IdempotencyKey: "k1"},
		{JobType: "email", IdempotencyKey: "k2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res []jobs.EnqueueManyResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := jobs.EnqueueMany(ctx, pool, []jobs.EnqueueRequest{
			{JobType: "email", IdempotencyKey: "k2"},
			{JobType: "email", IdempotencyKey: "k1", Payload: json.RawMessage(`{"other":true}`)},
			{JobType: "email", IdempotencyKey: "k3"},
		})
		done <- result{res, err}
	}()
	testdb.WaitBlocked(t, pool, 0)
	select {
	case r := <-done:
		t.Fatalf("second batch returned while the first was uncommitted: %+v", r)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantDisposition(t, r.res[0], runledger.DispositionExisting)
	if r.res[0].Job.ID != first[1].Job.ID {
		t.Fatalf("k2 found %s, want %s", r.res[0].Job.ID, first[1].Job.ID)
	}
	wantCode(t, r.res[1], runledger.CodeIdempotencyConflict)
	wantDisposition(t, r.res[2], runledger.DispositionInserted)
	if n, ev := countJobs(t, pool); n != 3 || ev != 3 {
		t.Fatalf("%d jobs, %d events, want 3 and 3", n, ev)
	}
}

// A batch whose backend is terminated while it waits on a key another
// transaction holds writes nothing, although it had inserted rows before
// the wait; rerun, it inserts every job; rerun again, every keyed request
// finds its job.
func TestEnqueueManyKilledMidBatchWritesNothing(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	tx := testdb.Begin(t, ctx, pool)
	if _, err := jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "k5", Payload: json.RawMessage(`{"holder":1}`)}); err != nil {
		t.Fatal(err)
	}
	var reqs []jobs.EnqueueRequest
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		reqs = append(reqs, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: k})
	}
	done := make(chan error, 1)
	go func() {
		_, err := jobs.EnqueueMany(ctx, pool, reqs)
		done <- err
	}()
	testdb.WaitBlocked(t, pool, 0)
	waiters := testdb.LockWaiters(t, pool)
	if len(waiters) != 1 {
		t.Fatalf("waiters %v, want the batch alone", waiters)
	}
	// The batch has inserted k1..k4 (key order) and waits on k5.
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1::int)`, waiters[0]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("a terminated batch reported success")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, ev := countJobs(t, pool); n != 0 || ev != 0 {
		t.Fatalf("%d jobs and %d events after the killed batch, want none", n, ev)
	}
	for round, want := range []runledger.Disposition{runledger.DispositionInserted, runledger.DispositionExisting} {
		res, err := jobs.EnqueueMany(ctx, pool, reqs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, r := range res {
			wantDisposition(t, r, want)
		}
	}
	if n, ev := countJobs(t, pool); n != 5 || ev != 5 {
		t.Fatalf("%d jobs and %d events after the reruns, want 5 and 5", n, ev)
	}
}

// As a single enqueue, a bulk enqueue holds its types' definitions FOR
// SHARE until its transaction ends: a definition change waits for it.
func TestEnqueueManyHoldsDefinitionForShare(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := runledger.Organization(uuid.New())
	tx := testdb.Begin(t, ctx, pool)
	if _, err := jobs.EnqueueManyTx(ctx, tx, []jobs.EnqueueRequest{{JobType: "email", Scope: org}}); err != nil {
		t.Fatal(err)
	}
	if !testdb.Citus() { // on Citus the lock is on the tenant node's placement (see TestEnqueueHoldsDefinitionForShare)
		if !testdb.RowLocked(t, pool, "job_definitions", "job_type = $1", "email", "NO KEY UPDATE") {
			t.Fatal("definition row is not share-locked during the bulk enqueue's transaction")
		}
	}
	changed := make(chan error, 1)
	go func() {
		_, err := jobs.PauseType(ctx, pool, "email")
		changed <- err
	}()
	testdb.WaitBlocked(t, pool, 0)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkEnqueueMany enqueues batches of 1,000 keyed requests in one
// tenant: ns/op is one batch, jobs/s the rate.
func BenchmarkEnqueueMany(b *testing.B) {
	ctx := context.Background()
	pool := testdb.New(b)
	testdb.Define(b, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	scope := runledger.Organization(uuid.New())
	const batch = 1000
	reqs := make([]jobs.EnqueueRequest, batch)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range reqs {
			reqs[k] = jobs.EnqueueRequest{Scope: scope, JobType: "email", IdempotencyKey: fmt.Sprintf("k%d-%d", i, k),
				Payload: json.RawMessage(`{"to":"someone@example.com"}`)}
		}
		res, err := jobs.EnqueueMany(ctx, pool, reqs)
		if err != nil || res[batch-1].Disposition != runledger.DispositionInserted {
			b.Fatalf("batch %d: %v", i, err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEnqueueKeyed is the single keyed Enqueue, for comparison: ns/op
// is one job.
func BenchmarkEnqueueKeyed(b *testing.B) {
	ctx := context.Background()
	pool := testdb.New(b)
	testdb.Define(b, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	scope := runledger.Organization(uuid.New())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: scope, JobType: "email", IdempotencyKey: fmt.Sprintf("k%d", i),
			Payload: json.RawMessage(`{"to":"someone@example.com"}`)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
