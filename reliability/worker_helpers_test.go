package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// runner is a worker running in the test's process, with every Finished
// it reported.
type runner struct {
	t    *testing.T
	w    *worker.Worker
	stop func() error

	mu       sync.Mutex
	finished []worker.Finished
	changed  chan struct{}
}

// startWorker creates a worker on pool with cfg (quiet unless cfg has a
// logger), lets register add its handlers, and runs it until stop or the
// end of the test.
func startWorker(t *testing.T, pool *pgxpool.Pool, cfg worker.Config, register func(*worker.Worker) error) *runner {
	t.Helper()
	r := &runner{t: t, changed: make(chan struct{}, 1)}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	next := cfg.OnFinished
	cfg.OnFinished = func(f worker.Finished) {
		r.mu.Lock()
		r.finished = append(r.finished, f)
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
		if next != nil {
			next(f)
		}
	}
	w, err := worker.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := register(w); err != nil {
		t.Fatal(err)
	}
	r.w = w
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(60 * time.Second):
				t.Error("worker.Run did not return within 60 s of its context's end")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// outcomes returns every Finished reported so far.
func (r *runner) outcomes() []worker.Finished {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]worker.Finished(nil), r.finished...)
}

// waitFinished waits until a Finished that match accepts was reported and
// returns it.
func (r *runner) waitFinished(what string, match func(worker.Finished) bool) worker.Finished {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		for _, f := range r.outcomes() {
			if match(f) {
				return f
			}
		}
		select {
		case <-r.changed:
		case <-deadline:
			r.t.Fatalf("timed out waiting for the worker to report %s", what)
		}
	}
}

// defineTypes defines job types with their max attempts.
func defineTypes(t testing.TB, pool *pgxpool.Pool, maxAttempts map[string]int32) {
	t.Helper()
	for typ, n := range maxAttempts {
		n := n
		testdb.Define(t, context.Background(), pool, jobs.DefinitionInput{JobType: typ, MaxAttempts: &n})
	}
}

// enqueueN enqueues n jobs of jobType and returns them.
func enqueueN(t testing.TB, pool *pgxpool.Pool, jobType string, n int) []runledger.Job {
	t.Helper()
	out := make([]runledger.Job, n)
	for i := range out {
		out[i] = testdb.Enqueue(t, context.Background(), pool, jobs.EnqueueRequest{JobType: jobType, Payload: json.RawMessage(`{}`)})
	}
	return out
}

// history is a job's events in order, each as TYPE, @attempt when the
// event has one, and :failure_kind when its payload names one:
// "ENQUEUED LEASED@1 RETRY_SCHEDULED@1:LEASE_EXPIRED LEASED@2 SUCCEEDED@2".
func history(t testing.TB, q testdb.Querier, id uuid.UUID) string {
	t.Helper()
	return testdb.Scalar[string](t, q, `
		SELECT coalesce(string_agg(event_type::text || coalesce('@' || attempt, '') || coalesce(':' || (payload->>'failure_kind'), ''),
		    ' ' ORDER BY run_number, id), '')
		FROM job_events WHERE job_id = $1`, id)
}

// effects is a job's side effects in order, each attempt:worker:
// "1:child-ab12,2:second".
func effects(t testing.TB, q testdb.Querier, id uuid.UUID) string {
	t.Helper()
	return testdb.Scalar[string](t, q, `
		SELECT coalesce(string_agg(attempt || ':' || worker_id, ',' ORDER BY attempt, at), '')
		FROM rl_effects WHERE job_id = $1`, id)
}

// output is the "by" field of a job's output: the worker that completed it.
func outputBy(t testing.TB, q testdb.Querier, id uuid.UUID) string {
	t.Helper()
	return testdb.Scalar[string](t, q, `SELECT coalesce(output->>'by', '') FROM job_queue WHERE id = $1`, id)
}

// countWhere counts job_queue rows matching a condition.
func countWhere(t testing.TB, q testdb.Querier, where string, args ...any) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_queue WHERE `+where, args...)
}

// checkNoAttemptFinishedTwice fails if any attempt of any job has more
// than one SUCCEEDED event, or more than one side effect, or any job more
// than one SUCCEEDED event, or any job is LEASED.
func checkNoAttemptFinishedTwice(t testing.TB, q testdb.Querier) {
	t.Helper()
	for what, sql := range map[string]string{
		"attempts with more than one SUCCEEDED event": `SELECT count(*) FROM (SELECT 1 FROM job_events WHERE event_type = 'SUCCEEDED'
			GROUP BY job_id, run_number, attempt HAVING count(*) > 1) d`,
		"jobs with more than one SUCCEEDED event": `SELECT count(*) FROM (SELECT 1 FROM job_events WHERE event_type = 'SUCCEEDED'
			GROUP BY job_id, run_number HAVING count(*) > 1) d`,
		"attempts whose handler ran (side effect) more than once": `SELECT count(*) FROM (SELECT 1 FROM rl_effects
			GROUP BY job_id, attempt HAVING count(*) > 1) d`,
		"jobs left LEASED": `SELECT count(*) FROM job_queue WHERE status = 'LEASED'`,
		"SUCCEEDED jobs without exactly one SUCCEEDED event at their attempt": `SELECT count(*) FROM job_queue q
			WHERE q.status = 'SUCCEEDED' AND (SELECT count(*) FROM job_events e
			    WHERE e.organization_id = q.organization_id AND e.job_id = q.id AND e.event_type = 'SUCCEEDED' AND e.run_number = q.run_number AND e.attempt = q.attempt) <> 1`,
	} {
		if n := testdb.Scalar[int64](t, q, sql); n != 0 {
			t.Errorf("%d %s", n, what)
		}
	}
}

// logCounter is a slog.Handler that counts warnings and errors by message.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newLogCounter() *logCounter { return &logCounter{n: map[string]int{}} }

func (h *logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	return nil
}

func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

// counts returns the counts as "message: n" lines, sorted, and the total.
func (h *logCounter) counts() (string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	total := 0
	for m, n := range h.n {
		lines = append(lines, fmt.Sprintf("%s: %d", m, n))
		total += n
	}
	sort.Strings(lines)
	return strings.Join(lines, "; "), total
}
