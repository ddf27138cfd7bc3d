package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/schedules"
	"github.com/runledger-go/runledger/worker"
)

type ticked struct {
	Schedule struct {
		Name string `json:"name"`
		Tick string `json:"tick"`
	} `json:"schedule"`
	Kind string `json:"kind"`
}

// TestWorkerFiresItsSchedules: a worker fires a due schedule of its type
// at start (it polls once an hour here) and runs the job it made, whose
// payload names the schedule and tick.
func TestWorkerFiresItsSchedules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, worker.Config{PollInterval: time.Hour})
	h.define("tick", 3)
	h.define("other", 3)
	got := make(chan ticked, 4)
	if err := worker.Register(h.w, "tick", func(ctx context.Context, j worker.Job[ticked]) (any, error) {
		got <- j.Payload
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []schedules.UpsertRequest{
		{Scope: runledger.Global(), Name: "hourly", Cron: "0 * * * *", JobType: "tick", Payload: []byte(`{"kind":"h"}`)},
		// Of a type this worker does not run: left to other workers.
		{Scope: runledger.Global(), Name: "theirs", Cron: "0 * * * *", JobType: "other"},
	} {
		if _, err := schedules.Upsert(h.ctx, h.pool, s); err != nil {
			t.Fatal(err)
		}
	}
	testdb.Exec(t, h.pool, `UPDATE job_schedules SET next_fire_at = date_trunc('hour', now())`)
	h.start()
	f := h.waitFinished(1)[0]
	p := <-got
	if f.Outcome != worker.OutcomeSucceeded || p.Schedule.Name != "hourly" || p.Kind != "h" {
		t.Fatalf("finished %+v with payload %+v", f, p)
	}
	if f.Job.IdempotencyKey == nil || *f.Job.IdempotencyKey != "schedule:hourly:"+p.Schedule.Tick {
		t.Errorf("key %v, tick %s", f.Job.IdempotencyKey, p.Schedule.Tick)
	}
	if n := testdb.Scalar[int64](t, h.pool, `SELECT count(*) FROM job_queue WHERE job_type = 'other'`); n != 0 {
		t.Errorf("the worker fired another type's schedule (%d jobs)", n)
	}
}
