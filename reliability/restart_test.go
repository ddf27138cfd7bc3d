package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

const (
	restartSources = 200
	restartKeys    = 3  // request keys per source
	restartClients = 16 // concurrent clients
	// Each (source, key) is requested twice, by different clients at
	// different times: the second must come back Existing with the same
	// replay.
	restartRepeats = 2
)

// restartItem is one replay request.
type restartItem struct {
	source uuid.UUID
	key    string
}

// restartRequest is one request of the run: an item and whether an
// earlier request for the same item was sent before it (the two may still
// run at the same time).
type restartRequest struct {
	restartItem
	repeat bool
}

func (it restartItem) request() replay.Request {
	return req(it.source, it.key, "restart reason "+it.key)
}

// restartStats counts what the clients saw. Requests counts requests by
// the error classes they met at least once before succeeding; errors
// counts every failed attempt by class and cause.
type restartStats struct {
	mu       sync.Mutex
	requests map[string]int
	errors   map[string]int
	outcomes map[string]int
}

func (s *restartStats) add(m map[string]int, k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m[k]++
}

// seenKey names the set of error classes a request met: "no error",
// "transient", "commit_unconfirmed+transient", ...
func seenKey(seen map[string]bool) string {
	if len(seen) == 0 {
		return "no error"
	}
	return strings.Join(sortedKeys(seen), "+")
}

// cause names the failure behind a classified error: its SQLSTATE, or the
// kind of connection failure.
func cause(err error) string {
	var e *runledger.Error
	if errors.As(err, &e) && e.SQLState != "" {
		return "sqlstate " + e.SQLState
	}
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() != "" {
		return "sqlstate " + pgErr.SQLState()
	}
	return "connection"
}

// TestServerRestartUnderLoad runs sixteen clients replaying two hundred
// succeeded sources (three request keys each, every request made twice)
// against a dedicated durable server, which the test stops in fast mode
// and then in immediate mode (crash recovery from the WAL) and starts
// again while the clients run. Clients retry the same request (same key
// and reason) on transient errors and on commit-unconfirmed errors, as the
// contract documents. Afterwards: exactly one replay per (source, run,
// key), each with its lineage row and its one ENQUEUED event, no lineage
// without its job, every client that got an answer for a key got the same
// replay, and the sources are unchanged.
func TestServerRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("server restart test: skipped under -short")
	}
	ctx := testdb.Context(t)
	srv, err := pgserver.Start(ctx, pgserver.Options{Durable: true, Logf: t.Logf})
	if err != nil {
		t.Fatalf("a dedicated server is required (PostgreSQL server binaries): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop server: %v", err)
		}
	})
	url := srv.URL("postgres")
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	if err := goose.Up(ctx, sqlDB); err != nil {
		t.Fatal(err)
	}
	_ = sqlDB.Close()

	setup := openPool(t, url, "rl-setup", 2, nil)
	testdb.DefineType(t, setup, "email")
	rs, err := setup.Query(ctx, `
		INSERT INTO job_queue (id, job_type, payload, status, priority, run_number, attempt, max_attempts,
		    timeout_seconds, stage, worker_id, started_at, finished_at, output)
		SELECT gen_random_uuid(), 'email', jsonb_build_object('n', g), 'SUCCEEDED', 100, 1, 1, 5, 60,
		    'completed', 'seed-worker', now(), now(), '{"done":true}'
		FROM generate_series(1, $1) g
		RETURNING id`, restartSources)
	if err != nil {
		t.Fatal(err)
	}
	sources, err := pgx.CollectRows(rs, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(t, setup)
	setup.Close()

	// Every (source, key) twice, all shuffled together: both restarts hit
	// a mix of first requests (inserting) and repeats (Existing), and the
	// two requests for one key may run at the same time.
	var items []restartRequest
	for r := 0; r < restartRepeats; r++ {
		for _, s := range sources {
			for k := 0; k < restartKeys; k++ {
				items = append(items, restartRequest{restartItem: restartItem{s, fmt.Sprintf("key-%d", k)}})
			}
		}
	}
	rand.New(rand.NewSource(1)).Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	seenItem := map[restartItem]bool{}
	for i := range items {
		items[i].repeat = seenItem[items[i].restartItem]
		seenItem[items[i].restartItem] = true
	}
	total := len(items)

	pool := openPool(t, url, "rl-restart", restartClients, nil)
	stats := &restartStats{requests: map[string]int{}, errors: map[string]int{}, outcomes: map[string]int{}}
	var (
		answersMu sync.Mutex
		answers   = map[restartItem]uuid.UUID{}
		failMu    sync.Mutex
		failures  []string
		done      atomic.Int64
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	// Progress marks: the test restarts the server when a third and two
	// thirds of the requests have been answered.
	marks := []int64{int64(total / 3), int64(2 * total / 3)}
	reached := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var markOnce [2]sync.Once

	queue := make(chan restartRequest)
	go func() {
		defer close(queue)
		for _, it := range items {
			select {
			case queue <- it:
			case <-ctx.Done():
				return
			}
		}
	}()

	serve := func(rq restartRequest) {
		it := rq.restartItem
		r := it.request()
		seen := map[string]bool{}
		unconfirmed := false
		backoff := 5 * time.Millisecond
		for attempt := 1; ; attempt++ {
			out, err := replay.SucceededJob(ctx, pool, r)
			if err == nil {
				got, ok := out.(replay.Replayed)
				if !ok {
					fail("%v: outcome %T, want Replayed", it, out)
					return
				}
				outcome := "first request: " + string(got.Disposition)
				if rq.repeat {
					outcome = "repeat request: " + string(got.Disposition)
				}
				if unconfirmed {
					outcome += " after commit_unconfirmed"
				}
				stats.add(stats.outcomes, outcome)
				answersMu.Lock()
				if prev, ok := answers[it]; ok && prev != got.Replay.JobID {
					fail("%v: replay %s, an earlier answer was %s", it, got.Replay.JobID, prev)
				}
				answers[it] = got.Replay.JobID
				answersMu.Unlock()
				stats.add(stats.requests, seenKey(seen))
				return
			}
			class := errClass(err)
			if class != "transient" && class != "commit_unconfirmed" {
				fail("%v: attempt %d: unexpected error %v (%s)", it, attempt, err, testdb.Detail(err))
				return
			}
			if class == "commit_unconfirmed" {
				unconfirmed = true
			}
			seen[class] = true
			stats.add(stats.errors, class+" ("+cause(err)+")")
			if ctx.Err() != nil {
				fail("%v: gave up: %v", it, err)
				return
			}
			time.Sleep(backoff) // retry backoff while the server restarts
			if backoff < 100*time.Millisecond {
				backoff *= 2
			}
		}
	}

	var wg sync.WaitGroup
	for c := 0; c < restartClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range queue {
				serve(it)
				n := done.Add(1)
				for i, m := range marks {
					if n >= m {
						i := i
						markOnce[i].Do(func() { close(reached[i]) })
					}
				}
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	start := time.Now()
	for i, mode := range []string{"fast", "immediate"} {
		select {
		case <-reached[i]:
		case <-allDone:
			t.Fatalf("the clients finished before the %s restart", mode)
		}
		t0 := time.Now()
		if err := srv.Restart(ctx, mode); err != nil {
			t.Fatalf("restart %s: %v", mode, err)
		}
		t.Logf("restart %s at %d/%d requests took %s", mode, done.Load(), total, time.Since(t0).Round(time.Millisecond))
	}
	<-allDone
	elapsed := time.Since(start)
	for _, f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		t.FailNow()
	}

	check := openPool(t, url, "rl-check", 2, nil)
	checkRestartLedger(t, check, sources, answers, before)

	t.Logf("%d requests (%d sources x %d keys x %d) by %d clients in %s, two restarts (fast, immediate)",
		total, restartSources, restartKeys, restartRepeats, restartClients, elapsed.Round(time.Millisecond))
	t.Logf("requests by the error classes they met before succeeding: %s", formatCounts(stats.requests))
	t.Logf("failed attempts by class (cause): %s", formatCounts(stats.errors))
	t.Logf("final outcomes: %s", formatCounts(stats.outcomes))
	if len(stats.errors) == 0 {
		t.Fatal("no request saw an error: the restarts did not hit the load")
	}
}

// checkRestartLedger verifies the ledger after the restart run.
func checkRestartLedger(t *testing.T, q testdb.Querier, sources []uuid.UUID, answers map[restartItem]uuid.UUID, before snapshot) {
	t.Helper()
	ctx := context.Background()
	want := len(sources) * restartKeys
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_replays`); n != int64(want) {
		t.Errorf("%d lineage rows, want %d (one per source and key)", n, want)
	}
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_queue`); n != int64(len(sources)+want) {
		t.Errorf("%d jobs, want %d sources + %d replays", n, len(sources), want)
	}
	for it, id := range answers {
		var got uuid.UUID
		var reason string
		err := q.QueryRow(ctx, `SELECT replay_job_id, reason FROM job_replays
			WHERE source_job_id = $1 AND source_run_number = 1 AND replay_request_key = $2`, it.source, it.key).Scan(&got, &reason)
		if err != nil || got != id || reason != it.request().Reason {
			t.Errorf("%v: lineage %s %q (%v), clients were told %s", it, got, reason, err, id)
		}
	}
	if len(answers) != want {
		t.Errorf("%d keys answered, want %d", len(answers), want)
	}
	for what, sql := range map[string]string{
		"replay jobs without a lineage row": `SELECT count(*) FROM job_queue q
			WHERE NOT (q.id = ANY($1)) AND NOT EXISTS (SELECT 1 FROM job_replays r WHERE r.replay_job_id = q.id)`,
		"lineage rows without their replay job": `SELECT count(*) FROM job_replays r
			WHERE NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.id = r.replay_job_id) AND cardinality($1::uuid[]) >= 0`,
		"replays without exactly one event, ENQUEUED": `SELECT count(*) FROM job_replays r
			WHERE (SELECT count(*) FROM job_events e WHERE e.job_id = r.replay_job_id) <> 1
			   OR NOT EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = r.replay_job_id AND e.event_type = 'ENQUEUED')
			   OR cardinality($1::uuid[]) < 0`,
		"replays not PENDING at run 1": `SELECT count(*) FROM job_replays r JOIN job_queue q ON q.id = r.replay_job_id
			WHERE (q.status <> 'PENDING' OR q.run_number <> 1) AND cardinality($1::uuid[]) >= 0`,
		"events on sources": `SELECT count(*) FROM job_events WHERE job_id = ANY($1)`,
	} {
		if n := testdb.Scalar[int64](t, q, sql, sources); n != 0 {
			t.Errorf("%d %s", n, what)
		}
	}
	srcSet := map[uuid.UUID]bool{}
	for _, s := range sources {
		srcSet[s] = true
	}
	now := rowsJSON(t, q, "job_queue", "id")
	nowSet := map[string]bool{}
	for _, r := range now {
		nowSet[r] = true
	}
	for _, r := range before.jobs {
		if !nowSet[r] {
			t.Errorf("source changed or lost: %s", r)
		}
	}
}
