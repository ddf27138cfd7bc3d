package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/worker"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// quiet discards the worker's logs in tests.
var quiet = slog.New(slog.DiscardHandler)

// harness is one test's database and a worker on it, with every Finished
// it reported.
type harness struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	w    *worker.Worker

	mu       sync.Mutex
	finished []worker.Finished
	changed  chan struct{}
}

func newHarness(t *testing.T, cfg worker.Config) *harness {
	t.Helper()
	h := &harness{t: t, ctx: testdb.Context(t), changed: make(chan struct{}, 1)}
	url := testdb.NewURL(t)
	h.pool = testdb.OpenPool(t, url, 12, nil)
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	cfg.OnFinished = func(f worker.Finished) {
		h.mu.Lock()
		h.finished = append(h.finished, f)
		h.mu.Unlock()
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
	w, err := worker.New(h.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	return h
}

// define defines jobType with max attempts.
func (h *harness) define(jobType string, maxAttempts int32) {
	h.t.Helper()
	testdb.Define(h.t, h.ctx, h.pool, jobs.DefinitionInput{JobType: jobType, MaxAttempts: &maxAttempts})
}

// start runs the worker until the test ends (or stop is called); stop
// returns Run's error.
func (h *harness) start() (stop func() error) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	h.t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFinished waits until n attempts have been reported and returns them.
func (h *harness) waitFinished(n int) []worker.Finished {
	h.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		h.mu.Lock()
		got := append([]worker.Finished(nil), h.finished...)
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-h.changed:
		case <-deadline:
			h.t.Fatalf("%d attempts finished, want %d", len(got), n)
		}
	}
}

func (h *harness) enqueue(jobType string, payload string) runledger.Job {
	h.t.Helper()
	return testdb.Enqueue(h.t, h.ctx, h.pool, jobs.EnqueueRequest{JobType: jobType, Payload: json.RawMessage(payload)})
}

func (h *harness) job(id uuid.UUID) runledger.Job {
	h.t.Helper()
	j, err := inspect.Get(h.ctx, h.pool, runledger.Global(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

type invoice struct {
	Number int `json:"number"`
}

// A registered handler gets the decoded payload and the leased record, and
// its output completes the job; OnFinished hears it after the commit.
func TestWorkerRunsAJobToSucceeded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{PollInterval: time.Hour})
	h.define("send_invoice", 3)
	var seen worker.Job[invoice]
	if err := worker.Register(h.w, "send_invoice", func(ctx context.Context, j worker.Job[invoice]) (any, error) {
		seen = j
		return map[string]any{"sent": j.Payload.Number}, nil
	}); err != nil {
		t.Fatal(err)
	}
	h.start()
	// The worker polls once an hour: only the enqueue's notification can
	// wake it.
	testdb.WaitFor(t, "the worker to listen", func() bool {
		return testdb.Scalar[int64](t, h.pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '-- name: WorkerListen %'`) == 1
	})
	j := h.enqueue("send_invoice", `{"number": 1042}`)
	f := h.waitFinished(1)[0]
	if f.Outcome != worker.OutcomeSucceeded || f.Job.ID != j.ID || f.Job.Status != runledger.JobStatusSucceeded {
		t.Fatalf("finished = %+v", f)
	}
	if seen.Payload.Number != 1042 || seen.Record.Status != runledger.JobStatusLeased || seen.Record.Attempt != 1 || *seen.Record.WorkerID != h.w.ID() {
		t.Fatalf("handler got %+v", seen)
	}
	got := h.job(j.ID)
	testdb.JSONEqual(t, "output", got.Output, `{"sent":1042}`)
	if types := testdb.EventTypes(t, h.pool, j.ID); len(types) != 3 || types[2] != "SUCCEEDED" {
		t.Fatalf("events %v", types)
	}
}

// A returned error fails the attempt as retryable; Terminal dead-letters;
// RetryAfter sets the delay; a panic is PANICKED and dead-letters; a
// handler past its deadline is TIMEOUT; a payload that does not decode is
// terminal. Each outcome has its failure kind in the event.
func TestWorkerRecordsFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{PollInterval: 20 * time.Millisecond})
	for _, typ := range []string{"fails", "terminal", "later", "panics", "slow", "typed"} {
		h.define(typ, 3)
	}
	failing := func(err error) worker.Handler[json.RawMessage] {
		return func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, err }
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(worker.Register(h.w, "fails", failing(errors.New("smtp down"))))
	must(worker.Register(h.w, "terminal", failing(worker.Terminal(errors.New("no such customer")))))
	must(worker.Register(h.w, "later", failing(worker.RetryAfter(time.Hour, errors.New("rate limited")))))
	must(worker.Register(h.w, "panics", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { panic("boom") }))
	must(worker.Register(h.w, "slow", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	must(worker.Register(h.w, "typed", func(ctx context.Context, _ worker.Job[invoice]) (any, error) { return nil, nil }))
	ids := map[string]uuid.UUID{}
	for _, typ := range []string{"fails", "terminal", "later", "panics", "typed"} {
		ids[typ] = h.enqueue(typ, `{"number": "not a number"}`).ID
	}
	slow := testdb.Enqueue(t, h.ctx, h.pool, jobs.EnqueueRequest{JobType: "slow", TimeoutSeconds: testdb.Ptr[int32](1)})
	ids["slow"] = slow.ID
	h.start()
	h.waitFinished(6)

	want := map[string]struct {
		status, kind, code string
	}{
		"fails":    {"PENDING", "RETRYABLE", worker.CodeHandlerFailed},
		"terminal": {"DEAD_LETTERED", "TERMINAL", worker.CodeHandlerFailed},
		"later":    {"PENDING", "RETRYABLE", worker.CodeHandlerFailed},
		"panics":   {"DEAD_LETTERED", "PANICKED", worker.CodePanicked},
		"slow":     {"PENDING", "TIMEOUT", worker.CodeTimeout},
		"typed":    {"DEAD_LETTERED", "TERMINAL", worker.CodePayloadInvalid},
	}
	for typ, w := range want {
		j := h.job(ids[typ])
		// The first attempt's outcome: a retry is due after Backoff(1), a
		// second, so by now the worker may have claimed it again.
		var event, kind string
		if err := h.pool.QueryRow(h.ctx, `SELECT event_type::text, payload->>'failure_kind' FROM job_events
			WHERE job_id = $1 AND event_type IN ('RETRY_SCHEDULED', 'DEAD_LETTERED') ORDER BY id LIMIT 1`, j.ID).Scan(&event, &kind); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		wantEvent, status := "DEAD_LETTERED", string(j.Status)
		if w.status == "PENDING" {
			wantEvent = "RETRY_SCHEDULED"
			if status == "LEASED" {
				status = "PENDING" // retried already
			}
		}
		if status != w.status || event != wantEvent || kind != w.kind || j.LastErrorCode == nil || *j.LastErrorCode != w.code {
			code := "<nil>"
			if j.LastErrorCode != nil {
				code = *j.LastErrorCode
			}
			t.Errorf("%s: %s after %s, kind %s, code %s; want %s after %s, %s, %s", typ, j.Status, event, kind, code, w.status, wantEvent, w.kind, w.code)
		}
	}
	if d := time.Until(h.job(ids["later"]).NextRunAt); d < 55*time.Minute {
		t.Errorf("RetryAfter(1h): due in %s", d)
	}
}

// Heartbeats keep a job that runs three times longer than its lease alive,
// while the same worker tries to recover expired leases every 50 ms: it
// finishes once (one SUCCEEDED event, at attempt 1), never recovered (no
// LEASE_EXPIRED failure, no retry or dead-letter), with the progress and
// checkpoint it reported stored and one PROGRESS event.
func TestWorkerHeartbeatsKeepALongJobAlive(t *testing.T) {
	t.Parallel()
	// Long enough that a heartbeat delayed by a loaded machine (two
	// cores shared with the rest of the suite) still lands within the
	// lease; 600 ms failed there about once in ten whole runs.
	lease := 2 * time.Second
	if testdb.Citus() {
		// A heartbeat on Citus is a distributed transaction: on a loaded
		// two-core machine one took longer than 400 ms, the margin a
		// 600 ms lease leaves it, and the job was recovered.
		// The worker also counts a lease as ending a tenth early (its
		// margin for the clocks), so leave a round trip room for both.
		lease = 4 * time.Second
	}
	h := newHarness(t, worker.Config{Lease: lease, HeartbeatInterval: lease / 3, RecoveryInterval: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	h.define("long", 1)
	if err := worker.Register(h.w, "long", func(ctx context.Context, j worker.Job[json.RawMessage]) (any, error) {
		if err := worker.SetProgress(ctx, 1, 3); err != nil {
			return nil, err
		}
		if err := worker.SetCheckpoint(ctx, map[string]int{"page": 1}); err != nil {
			return nil, err
		}
		select {
		case <-time.After(3 * lease):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, worker.SetProgress(ctx, 3, 3)
	}); err != nil {
		t.Fatal(err)
	}
	j := h.enqueue("long", `{}`)
	h.start()
	f := h.waitFinished(1)[0]
	if f.Outcome != worker.OutcomeSucceeded {
		t.Fatalf("finished %+v", f)
	}
	if f.Duration < 3*lease {
		t.Fatalf("the handler ran %s, want at least three leases (%s)", f.Duration, 3*lease)
	}
	got := h.job(j.ID)
	if got.Attempt != 1 || got.ProgressDone == nil || *got.ProgressDone != 3 {
		t.Fatalf("job %+v, want attempt 1 with progress 3", got)
	}
	if got.LastHeartbeatAt == nil || got.StartedAt == nil || got.LastHeartbeatAt.Sub(*got.StartedAt) < 2*lease {
		t.Fatalf("last heartbeat %v, started %v: want heartbeats until the end of the job", got.LastHeartbeatAt, got.StartedAt)
	}
	if n := testdb.Scalar[int64](t, h.pool, `SELECT count(*) FROM job_events WHERE job_id = $1 AND event_type = 'SUCCEEDED' AND attempt = 1`, j.ID); n != 1 {
		t.Fatalf("%d SUCCEEDED events, want exactly one", n)
	}
	if n := testdb.Scalar[int64](t, h.pool, `SELECT count(*) FROM job_events WHERE job_id = $1 AND payload->>'failure_kind' = 'LEASE_EXPIRED'`, j.ID); n != 0 {
		t.Fatalf("%d LEASE_EXPIRED failures: the lease was recovered", n)
	}
	testdb.JSONEqual(t, "checkpoint", got.Checkpoint, `{"page":1}`)
	types := testdb.EventTypes(t, h.pool, j.ID)
	progress := 0
	for _, typ := range types {
		switch typ {
		case "PROGRESS":
			progress++
		case "RETRY_SCHEDULED", "DEAD_LETTERED":
			t.Fatalf("events %v: the lease was recovered", types)
		}
	}
	if progress != 1 {
		t.Fatalf("events %v, want one PROGRESS", types)
	}
}

// A refused heartbeat (the job was canceled while it ran) cancels the
// handler, and nothing more is written for the attempt: the job stays
// CANCELED, with no completion.
func TestWorkerStopsAJobWhoseHeartbeatIsRefused(t *testing.T) {
	t.Parallel()
	lease := 600 * time.Millisecond
	h := newHarness(t, worker.Config{Lease: lease, HeartbeatInterval: lease / 6, PollInterval: 20 * time.Millisecond})
	h.define("cancelable", 3)
	running := make(chan struct{})
	stopped := make(chan error, 1)
	if err := worker.Register(h.w, "cancelable", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		close(running)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return map[string]bool{"done": true}, nil
	}); err != nil {
		t.Fatal(err)
	}
	j := h.enqueue("cancelable", `{}`)
	h.start()
	<-running
	if _, err := jobs.Cancel(h.ctx, h.pool, jobs.CancelRequest{JobID: j.ID, Reason: "operator"}); err != nil {
		t.Fatal(err)
	}
	if cause := <-stopped; cause == nil {
		t.Fatal("the handler's context ended without a cause")
	}
	f := h.waitFinished(1)[0]
	if f.Outcome != worker.OutcomeLost {
		t.Fatalf("finished %+v, want lost", f)
	}
	if got := h.job(j.ID); got.Status != runledger.JobStatusCanceled || got.Output != nil {
		t.Fatalf("job %s with output %s, want CANCELED without output", got.Status, got.Output)
	}
}

// On shutdown the worker stops claiming, lets running handlers finish,
// hands back jobs it claimed but had not started without spending their
// attempt, and leaves nothing LEASED; a handler still running at the
// shutdown timeout is canceled and its attempt is handed back without
// spending it (never failed: on its last attempt that would dead-letter
// the job), due again at once.
func TestWorkerShutsDownGracefully(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{ShutdownTimeout: 300 * time.Millisecond, PollInterval: time.Hour, DisableListen: true})
	h.define("quick", 3)
	// One attempt only: a shutdown that failed the attempt would
	// dead-letter the job.
	h.define("stubborn", 1)
	started := make(chan struct{}, 10)
	if err := worker.Register(h.w, "quick", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		started <- struct{}{}
		time.Sleep(50 * time.Millisecond)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(h.w, "stubborn", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	quick := h.enqueue("quick", `{}`)
	stubborn := h.enqueue("stubborn", `{}`)
	stop := h.start()
	<-started
	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if got := h.job(quick.ID); got.Status != runledger.JobStatusSucceeded {
		t.Fatalf("quick job %s, want it finished during the shutdown", got.Status)
	}
	got := h.job(stubborn.ID)
	if got.Status != runledger.JobStatusPending || got.Attempt != 0 || got.LastErrorCode != nil || got.NextRunAt.After(time.Now()) {
		t.Fatalf("stubborn job %s attempt %d code %v due %s, want PENDING at attempt 0, no failure, due now",
			got.Status, got.Attempt, got.LastErrorCode, got.NextRunAt)
	}
	if types := testdb.EventTypes(t, h.pool, stubborn.ID); len(types) != 3 || types[1] != "LEASED" || types[2] != "STAGE_CHANGED" {
		t.Fatalf("stubborn job's events %v, want ENQUEUED LEASED STAGE_CHANGED", types)
	}
	var handedBack bool
	for _, f := range h.waitFinished(2) {
		if f.Job.ID == stubborn.ID {
			handedBack = f.Outcome == worker.OutcomeHandedBack
		}
	}
	if !handedBack {
		t.Fatal("the stubborn job's attempt was not reported handed back")
	}
	if n := testdb.Scalar[int64](t, h.pool, `SELECT count(*) FROM job_queue WHERE status = 'LEASED'`); n != 0 {
		t.Fatalf("%d jobs left LEASED", n)
	}

	// Jobs claimed when the context ends, before they start, are handed
	// back at the attempt they had.
	h2 := newHarness(t, worker.Config{PollInterval: time.Hour, DisableListen: true})
	h2.define("quick", 3)
	if err := worker.Register(h2.w, "quick", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		t.Error("a job started after the shutdown began")
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	a, b := h2.enqueue("quick", `{}`), h2.enqueue("quick", `{}`)
	ctx, cancel := context.WithCancel(h2.ctx)
	// Failpoints are process-wide and other tests' workers claim in
	// parallel: only this worker's claim ends its context.
	defer failpoint.EnableFor(worker.FailpointAfterClaim, func(_ context.Context, workerID any) {
		if workerID == h2.w.ID() {
			cancel()
		}
	}, nil)()
	if err := h2.w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uuid.UUID{a.ID, b.ID} {
		j := h2.job(id)
		if j.Status != runledger.JobStatusPending || j.Attempt != 0 || j.WorkerID != nil {
			t.Fatalf("handed-back job %s at attempt %d worker %v, want PENDING at 0", j.Status, j.Attempt, j.WorkerID)
		}
		if types := testdb.EventTypes(t, h2.pool, id); len(types) != 3 || types[2] != "STAGE_CHANGED" {
			t.Fatalf("events %v", types)
		}
	}
}

// The worker recovers the expired lease of a crashed worker, and runs the
// job again once it is due.
func TestWorkerRecoversAnotherWorkersExpiredLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{RecoveryInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	h.define("orphan", 3)
	if err := worker.Register(h.w, "orphan", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return "ok", nil }); err != nil {
		t.Fatal(err)
	}
	j := h.enqueue("orphan", `{}`)
	if _, err := lease.Claim(h.ctx, h.pool, lease.ClaimRequest{WorkerID: "crashed", Limit: 1, Lease: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// The retry after a lost lease waits Backoff(1): make it due at once
	// when recovery writes it (on Citus, which has no triggers on
	// distributed tables, once recovery has written it).
	if !testdb.Citus() {
		testdb.Exec(t, h.pool, `CREATE FUNCTION due_now() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.next_run_at := now(); RETURN NEW; END $$`)
		testdb.Exec(t, h.pool, `CREATE TRIGGER due_now BEFORE UPDATE ON job_queue FOR EACH ROW WHEN (NEW.status = 'PENDING') EXECUTE FUNCTION due_now()`)
	}
	h.start()
	if testdb.Citus() {
		testdb.WaitFor(t, "recovery to schedule the retry", func() bool {
			return len(testdb.EventTypes(t, h.pool, j.ID)) >= 3
		})
		testdb.Exec(t, h.pool, `UPDATE job_queue SET next_run_at = now() WHERE id = $1 AND status = 'PENDING'`, j.ID)
	}
	f := h.waitFinished(1)[0]
	if f.Outcome != worker.OutcomeSucceeded || f.Job.Attempt != 2 {
		t.Fatalf("finished %+v, want the job succeeded at attempt 2", f)
	}
	if types := testdb.EventTypes(t, h.pool, j.ID); len(types) != 5 || types[2] != "RETRY_SCHEDULED" {
		t.Fatalf("events %v", types)
	}
}
