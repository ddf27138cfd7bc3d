package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// New refuses a worker id every claim would refuse (blank, a NUL byte,
// invalid UTF-8, over 255 bytes) and a pool too small to run the worker
// at all, with an error rather than a warning.
func TestNewRefusesAWorkerIDOrPoolItCannotRunWith(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	pool := testdb.OpenPool(t, url, 6, nil)
	for name, id := range map[string]string{
		"blank":     " \t",
		"nul":       "rlw-\x00",
		"not utf-8": "rlw-\xff",
		"too long":  strings.Repeat("w", 256),
	} {
		if _, err := worker.New(pool, worker.Config{WorkerID: id}); err == nil {
			t.Errorf("New accepted a %s worker id", name)
		}
	}
	if _, err := worker.New(pool, worker.Config{WorkerID: strings.Repeat("w", 255)}); err != nil {
		t.Errorf("New refused a 255-byte worker id: %v", err)
	}

	one := testdb.OpenPool(t, url, 1, nil)
	if _, err := worker.New(one, worker.Config{}); err == nil {
		t.Error("New accepted a one-connection pool, which LISTEN takes whole")
	}
	if _, err := worker.New(one, worker.Config{DisableListen: true}); err != nil {
		t.Errorf("New refused a one-connection pool without LISTEN: %v", err)
	}
	two := testdb.OpenPool(t, url, 2, nil)
	if _, err := worker.New(two, worker.Config{Retention: time.Hour}); err == nil {
		t.Error("New accepted a two-connection pool for LISTEN and the scheduled prune's lock")
	}
	if _, err := worker.New(two, worker.Config{}); err != nil {
		t.Errorf("New refused a two-connection pool: %v", err)
	}
}

// A handler that returns success after its deadline fails the attempt as
// TIMEOUT: its output is not stored.
func TestWorkerFailsALateSuccessAsTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{PollInterval: 20 * time.Millisecond})
	h.define("late", 3)
	if err := worker.Register(h.w, "late", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		<-ctx.Done()
		return map[string]string{"done": "late"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	j := testdb.Enqueue(t, h.ctx, h.pool, jobs.EnqueueRequest{JobType: "late", TimeoutSeconds: testdb.Ptr[int32](1)})
	h.start()
	f := h.waitFinished(1)[0]
	if f.Outcome != worker.OutcomeRetried || f.Kind != runledger.FailureTimeout {
		t.Fatalf("late success finished %s (%s), want retried as TIMEOUT", f.Outcome, f.Kind)
	}
	var kind string
	if err := h.pool.QueryRow(h.ctx, `SELECT payload->>'failure_kind' FROM job_events WHERE job_id = $1 AND event_type = 'RETRY_SCHEDULED'`,
		j.ID).Scan(&kind); err != nil || kind != "TIMEOUT" {
		t.Fatalf("failure kind %q (%v), want TIMEOUT", kind, err)
	}
	if got := h.job(j.ID); got.Output != nil || got.LastErrorCode == nil || *got.LastErrorCode != worker.CodeTimeout {
		t.Fatalf("job output %s code %v, want no output and %s", got.Output, got.LastErrorCode, worker.CodeTimeout)
	}
}

type codedErr struct{ code string }

func (e codedErr) Error() string     { return "failed with a code" }
func (e codedErr) ErrorCode() string { return e.code }

// One bad outcome never holds up another. Outputs and error codes the
// database would refuse (over 1 MiB, a \u0000, a NUL in a code) fail
// their attempts terminally as worker.output_invalid when the handler
// returns, saying what was wrong without storing it. An output the
// library accepts and the database refuses (here a CHECK the test adds)
// is written apart from the batch it came in, which the worker splits, so
// that every other outcome of the batch is written. A failure the
// database refuses even cleaned is given up: its lease is no longer
// renewed and a recovery takes the job back. A good job enqueued after
// them all finishes.
func TestWorkerIsolatesBadOutcomes(t *testing.T) {
	t.Parallel()
	if testdb.Citus() {
		// The test holds the gate job's row so that the outcomes gather in
		// one batch, and waits until the completion blocks on it; on the
		// Citus lane that wait was not seen by the lock-wait probe. The
		// splitting and validation it checks are the worker's own, the
		// same on either engine.
		t.Skip("the gate's lock wait is not observable on the Citus lane")
	}
	h := newHarness(t, worker.Config{PollInterval: 20 * time.Millisecond, Concurrency: 20,
		Lease: 2 * time.Second, HeartbeatInterval: 300 * time.Millisecond, RecoveryInterval: 200 * time.Millisecond})
	testdb.Exec(t, h.pool, `ALTER TABLE job_queue ADD CONSTRAINT rl_test_no_poison CHECK (output IS NULL OR NOT output ? 'poison')`)
	testdb.Exec(t, h.pool, `ALTER TABLE job_queue ADD CONSTRAINT rl_test_no_venom CHECK (last_error_message IS NULL OR last_error_message NOT LIKE '%venom%')`)
	returned := make(chan string, 32)
	gateRunning, gateLocked := make(chan struct{}), make(chan struct{})
	outputs := map[string]func() (any, error){
		"gate": func() (any, error) {
			close(gateRunning)
			<-gateLocked
			return "ok", nil
		},
		"good":        func() (any, error) { return map[string]int{"n": 1}, nil },
		"big":         func() (any, error) { return json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`), nil },
		"nul":         func() (any, error) { return json.RawMessage(`{"s":"a\u0000b"}`), nil },
		"bad_code":    func() (any, error) { return nil, codedErr{"bad\x00code"} },
		"poison":      func() (any, error) { return map[string]bool{"poison": true}, nil },
		"poison_fail": func() (any, error) { return nil, errors.New("venom in the message") },
	}
	for typ, out := range outputs {
		h.define(typ, 1)
		if err := worker.Register(h.w, typ, func(ctx context.Context, j worker.Job[json.RawMessage]) (any, error) {
			defer func() { returned <- typ }()
			return out()
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The gate's completion waits on a row lock the test takes once the
	// gate runs, so that the other outcomes pile up behind it and are
	// written in one batch.
	ids := map[string]uuid.UUID{}
	ids["gate"] = h.enqueue("gate", `{}`).ID
	var goods []uuid.UUID
	for _, typ := range []string{"good", "big", "good", "nul", "bad_code", "good", "poison", "poison_fail", "good"} {
		id := h.enqueue(typ, `{}`).ID
		if typ == "good" {
			goods = append(goods, id)
		} else {
			ids[typ] = id
		}
	}
	h.start()
	<-gateRunning
	tx := testdb.Begin(t, h.ctx, h.pool)
	testdb.LockJob(t, tx, ids["gate"], "UPDATE")
	close(gateLocked)
	for range 10 {
		<-returned
	}
	testdb.WaitBlocked(t, h.pool, 0)
	if err := tx.Rollback(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.waitFinished(10)
	late := h.enqueue("good", `{}`)
	h.waitFinished(11)

	for _, id := range append(goods, ids["gate"], late.ID) {
		if j := h.job(id); j.Status != runledger.JobStatusSucceeded {
			t.Errorf("good job %s is %s, want SUCCEEDED", id, j.Status)
		}
	}
	for typ, about := range map[string]string{"big": "output", "nul": "output", "bad_code": "error", "poison": "refused"} {
		j := h.job(ids[typ])
		msg := ""
		if j.LastErrorMessage != nil {
			msg = *j.LastErrorMessage
		}
		if j.Status != runledger.JobStatusDeadLettered || j.LastErrorCode == nil || *j.LastErrorCode != worker.CodeOutputInvalid ||
			!strings.Contains(msg, about) || strings.Contains(msg, "xxxxxxxx") || j.Output != nil {
			t.Errorf("%s: %s code %v message %q, want DEAD_LETTERED, %s, a message about the %s", typ, j.Status, j.LastErrorCode, msg, worker.CodeOutputInvalid, about)
		}
		var kind string
		if err := h.pool.QueryRow(h.ctx, `SELECT payload->>'failure_kind' FROM job_events WHERE job_id = $1 AND event_type = 'DEAD_LETTERED'`,
			j.ID).Scan(&kind); err != nil || kind != "TERMINAL" {
			t.Errorf("%s: failure kind %q (%v), want TERMINAL", typ, kind, err)
		}
	}
	// The failure no cleaning makes acceptable is given up, not retried:
	// its lease runs out and a recovery dead-letters the job (one attempt).
	testdb.WaitFor(t, "the refused failure's job to be recovered", func() bool {
		return h.job(ids["poison_fail"]).Status == runledger.JobStatusDeadLettered
	})
	if j := h.job(ids["poison_fail"]); j.Attempt != 1 || j.LastErrorCode == nil || *j.LastErrorCode == worker.CodeHandlerFailed {
		t.Errorf("refused failure: attempt %d code %v, want recovered at attempt 1", j.Attempt, j.LastErrorCode)
	}
	var lost bool
	for _, f := range h.waitFinished(11) {
		if f.Job.ID == ids["poison_fail"] {
			lost = f.Outcome == worker.OutcomeLost
		}
	}
	if !lost {
		t.Error("the refused failure was not reported lost")
	}
}

// A panicking OnFinished or OnPruned is recovered and logged: the worker
// goes on running jobs and Run returns nil.
func TestWorkerRecoversPanickingHooks(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.OpenPool(t, testdb.NewURL(t), 8, nil)
	var logs lockedBuffer
	var finished, pruned atomic.Int32
	w, err := worker.New(pool, worker.Config{
		PollInterval: 20 * time.Millisecond, Retention: time.Hour,
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
		OnFinished: func(worker.Finished) { finished.Add(1); panic("finished hook") },
		OnPruned:   func(health.PruneResult) { pruned.Add(1); panic("pruned hook") },
	})
	if err != nil {
		t.Fatal(err)
	}
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "hooked"})
	if err := worker.Register(w, "hooked", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	a := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "hooked"})
	b := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "hooked"})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	testdb.WaitFor(t, "both jobs to finish and the prune to run", func() bool { return finished.Load() == 2 && pruned.Load() >= 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	for _, id := range []uuid.UUID{a.ID, b.ID} {
		if j, err := inspect.Get(ctx, pool, runledger.Global(), id); err != nil || j.Status != runledger.JobStatusSucceeded {
			t.Fatalf("job %s: %s (%v)", id, j.Status, err)
		}
	}
	for _, hook := range []string{"OnFinished", "OnPruned"} {
		if !strings.Contains(logs.String(), `"hook":"`+hook+`"`) {
			t.Errorf("no log record of the %s panic", hook)
		}
	}
}

// The worker's log records name it by the fingerprint of its id, never by
// the id, which fences its writes.
func TestWorkerLogsTheWorkerIDsFingerprintOnly(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	h := newHarness(t, worker.Config{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	h.define("logged", 1)
	if err := worker.Register(h.w, "logged", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		return nil, worker.Terminal(errors.New("fails"))
	}); err != nil {
		t.Fatal(err)
	}
	h.enqueue("logged", `{}`)
	stop := h.start()
	h.waitFinished(1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if fp := worker.Fingerprint(h.w.ID()); len(fp) != 8 || !strings.Contains(out, fp) {
		t.Errorf("the logs do not name the worker by its fingerprint %q:\n%s", fp, out)
	}
	if strings.Contains(out, h.w.ID()) {
		t.Errorf("the logs hold the worker id:\n%s", out)
	}
}

// lockedBuffer is a bytes.Buffer safe for the worker's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Progress and a checkpoint a handler reported just before failing are
// written with the failure (no heartbeat ran between), so that the retry
// resumes from them.
func TestWorkerWritesProgressAndCheckpointWithAFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{PollInterval: 20 * time.Millisecond, Lease: time.Minute})
	h.define("resumable", 3)
	if err := worker.Register(h.w, "resumable", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		if err := worker.SetProgress(ctx, 3, 10); err != nil {
			return nil, err
		}
		if err := worker.SetCheckpoint(ctx, map[string]int{"page": 3}); err != nil {
			return nil, err
		}
		return nil, worker.RetryAfter(time.Hour, errors.New("upstream down"))
	}); err != nil {
		t.Fatal(err)
	}
	j := h.enqueue("resumable", `{}`)
	h.start()
	if f := h.waitFinished(1)[0]; f.Outcome != worker.OutcomeRetried {
		t.Fatalf("finished %s, want retried", f.Outcome)
	}
	got := h.job(j.ID)
	if got.ProgressDone == nil || *got.ProgressDone != 3 || got.ProgressTotal == nil || *got.ProgressTotal != 10 {
		t.Fatalf("progress %v of %v, want 3 of 10", got.ProgressDone, got.ProgressTotal)
	}
	testdb.JSONEqual(t, "checkpoint", got.Checkpoint, `{"page":3}`)
}
