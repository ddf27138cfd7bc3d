package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// A type registered with MaxConcurrent(1) holds at most one of the
// worker's slots, however many of its jobs are due and however urgent:
// while its one handler is stuck, the other type's jobs run in the other
// slots. Without the limit the stuck type's jobs, older and at a higher
// priority, would take every slot and the other type would never run.
func TestWorkerMaxConcurrentKeepsSlotsForOtherTypes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{Concurrency: 3, PollInterval: 20 * time.Millisecond})
	h.define("slow", 3)
	h.define("fast", 3)
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	var running, most atomic.Int32
	err := worker.Register(h.w, "slow", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		running.Add(-1)
		return nil, nil
	}, worker.MaxConcurrent(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(h.w, "fast", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		testdb.Enqueue(t, h.ctx, h.pool, jobs.EnqueueRequest{JobType: "slow", Priority: testdb.Ptr[int32](1000)})
	}
	for range 3 {
		h.enqueue("fast", `{}`)
	}
	h.start()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no slow handler started")
	}
	for _, f := range h.waitFinished(3) {
		if f.Job.JobType != "fast" || f.Outcome != worker.OutcomeSucceeded {
			t.Fatalf("finished while the slow handler is stuck: %+v", f)
		}
	}
	if n := testdb.Scalar[int64](t, h.pool, `SELECT count(*) FROM job_queue WHERE job_type = 'slow' AND status = 'LEASED'`); n != 1 {
		t.Fatalf("%d slow jobs leased, want 1", n)
	}
	close(release)
	h.waitFinished(7)
	if m := most.Load(); m != 1 {
		t.Fatalf("up to %d slow handlers ran at once, want 1", m)
	}
}

func TestRegisterRefusesABadLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{})
	noop := func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }
	if err := worker.Register(h.w, "a", noop, worker.MaxConcurrent(0)); err == nil {
		t.Fatal("MaxConcurrent(0) accepted")
	}
	if err := worker.Register(h.w, "a", noop, nil); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("nil option: %v", err)
	}
	if err := worker.Register(h.w, "a", noop, worker.MaxConcurrent(2)); err != nil {
		t.Fatal(err)
	}
}

// A type paused before a worker starts (the pause is a row, so it lasts
// across worker and server restarts) is not claimed: the worker runs a job
// of another type enqueued after it, and the paused one stays PENDING;
// resumed, the worker runs it within its poll interval.
func TestWorkerHonoursAPausedType(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{PollInterval: 20 * time.Millisecond})
	h.define("paused", 3)
	h.define("marker", 3)
	noop := func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }
	for _, typ := range []string{"paused", "marker"} {
		if err := worker.Register(h.w, typ, noop); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jobs.PauseType(h.ctx, h.pool, "paused"); err != nil {
		t.Fatal(err)
	}
	held := h.enqueue("paused", `{}`)
	marker := h.enqueue("marker", `{}`)
	h.start()
	if f := h.waitFinished(1); f[0].Job.ID != marker.ID {
		t.Fatalf("first finished %+v, want the marker job", f[0].Job)
	}
	if j := h.job(held.ID); j.Status != "PENDING" || j.Attempt != 0 {
		t.Fatalf("paused type's job %s at attempt %d, want PENDING at 0", j.Status, j.Attempt)
	}
	if _, err := jobs.ResumeType(h.ctx, h.pool, "paused"); err != nil {
		t.Fatal(err)
	}
	if f := h.waitFinished(2); f[1].Job.ID != held.ID || f[1].Outcome != worker.OutcomeSucceeded {
		t.Fatalf("after resume finished %+v", f[1])
	}
}

// A bulk enqueue wakes the workers: with an hour's poll interval only its
// notification can make the worker claim the batch.
func TestWorkerWokenByABulkEnqueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{PollInterval: time.Hour})
	h.define("mail", 3)
	if err := worker.Register(h.w, "mail", func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	h.start()
	testdb.WaitFor(t, "the worker to listen", func() bool {
		return testdb.Scalar[int64](t, h.pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '-- name: WorkerListen %'`) == 1
	})
	res, err := jobs.EnqueueMany(h.ctx, h.pool, []jobs.EnqueueRequest{{JobType: "mail"}, {JobType: "mail"}, {JobType: "mail"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	h.waitFinished(3)
}
