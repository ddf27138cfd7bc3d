package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/worker"
)

// The worker runtime's part of the soak: a producer enqueues jobs of
// workType at -worker-rate per second (up to producerInFlight at a time),
// each with a chosen id (so that a retried enqueue is idempotent) and a
// kind in its payload that decides what its handler does; -workers
// worker.Worker instances (3 by default), each with its own worker id and
// its own pool, -worker-concurrency handlers (8), -worker-lease (2 s) and
// lease recovery every -worker-recovery (1 s), run them for the whole
// load, across the restart, and drain what is left once the load ends.
// They share this process (separate pools, not separate processes): the
// memory and goroutines the soak reports are all of them together, with
// the clients. Every handler that gets as far records a side effect, a
// row of soak_effects (job, attempt), so that an attempt run twice shows
// in SQL. OnFinished acknowledges every succeeded and dead-lettered job
// to the log the checks read.

const (
	appWorker = "soak-worker"
	// workerIDPrefix and the worker's number (1, 2, ...) are its id.
	workerIDPrefix = "soak-runtime-"
	workType       = "soak.work"
	// workMaxAttempts leaves room for attempts the restart fails (a side
	// effect that cannot be written fails its attempt, retried at once;
	// a lease that runs out during the outage is recovered).
	workMaxAttempts = 8
	workTimeout     = 120 // seconds
)

// workerPoolSize is the connections of one worker's pool: its six and one
// for each handler's side effect.
func workerPoolSize(cfg config) int { return 6 + cfg.workerConcurrency }

// workerIDs are the runtime's worker ids.
func workerIDs(cfg config) []string {
	ids := make([]string, cfg.workers)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", workerIDPrefix, i+1)
	}
	return ids
}

// Worker job kinds, with their weights out of 10,000 and what the handler
// does:
//
//	ok        records its side effect, works 5 to 20 ms, completes
//	retry     records its side effect and fails its first attempt (retry at once), then works 5 to 20 ms and completes
//	slow      records its side effect, works 200 ms to 1 s, completes
//	long      records its side effect, works 2.5 leases reporting progress (heartbeats keep it), completes
//	terminal  fails with a terminal error: DEAD_LETTERED, TERMINAL
//	panic     panics: DEAD_LETTERED, PANICKED
//	timeout   (timeout 1 s, 2 attempts) waits for its deadline: TIMEOUT twice, DEAD_LETTERED
var workKinds = []struct {
	name   string
	weight int
}{
	{"ok", 8540}, {"retry", 800}, {"slow", 200}, {"long", 10},
	{"terminal", 250}, {"panic", 150}, {"timeout", 50},
}

// Acknowledgements of the runtime.
const (
	ackWorkEnqueued  = "work_enqueued"  // the producer enqueued this job (key: its kind)
	ackWorkSucceeded = "work_succeeded" // OnFinished: this job's attempt succeeded
	ackWorkDead      = "work_dead"      // OnFinished: this job's attempt dead-lettered it
)

// Operation kinds of the runtime, as the report names them.
const (
	opWorkEnqueue   = "worker: enqueue (chosen id)"
	opWorkSucceeded = "worker: attempt succeeded"
	opWorkRetried   = "worker: attempt failed, retry"
	opWorkDead      = "worker: attempt failed, dead-lettered"
	cntWorkLost     = "  worker: attempts given up (lease gone, nothing written)"
)

type workPayload struct {
	Kind string `json:"kind"`
	N    int    `json:"n"`
}

// runtimeLoad is the producer and the workers.
type runtimeLoad struct {
	cfg      config
	pools    []*pgxpool.Pool // one per worker
	producer *client         // its do() retries, its stats and acks
	st       *stats
	acks     *ackLog
	logs     *logWatch // shared by the workers
	ws       []*worker.Worker
	rng      *rand.Rand
	seq      int

	mu       sync.Mutex
	enqueued map[string]int64 // by kind
	runErr   error
	drained  time.Duration
	drainErr error
}

// newRuntimeLoad makes one worker on each of pools (cfg.workers of them).
func newRuntimeLoad(cfg config, pools []*pgxpool.Pool, producerPool *pgxpool.Pool, st *stats, acks *ackLog) (*runtimeLoad, error) {
	rt := &runtimeLoad{cfg: cfg, pools: pools, st: st, acks: acks, logs: newLogWatch(),
		producer: newClient(cfg.clients, producerPool, st, acks, cfg.lease),
		rng:      rand.New(rand.NewSource(424242)), enqueued: map[string]int64{}}
	for i, id := range workerIDs(cfg) {
		pool := pools[i]
		w, err := worker.New(pool, worker.Config{
			WorkerID: id, Concurrency: cfg.workerConcurrency, Lease: cfg.workerLease,
			RecoveryInterval: cfg.workerRecovery, Logger: slog.New(rt.logs), OnFinished: rt.finished,
		})
		if err != nil {
			return nil, err
		}
		// Each worker's handlers write their side effect on its own pool.
		handle := func(ctx context.Context, j worker.Job[workPayload]) (any, error) { return rt.handle(ctx, pool, j) }
		if err := worker.Register(w, workType, handle); err != nil {
			return nil, err
		}
		rt.ws = append(rt.ws, w)
	}
	return rt, nil
}

// run runs the workers until ctx ends (their shutdown included); the
// first error any Run returns is kept.
func (rt *runtimeLoad) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, w := range rt.ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				rt.mu.Lock()
				if rt.runErr == nil {
					rt.runErr = err
				}
				rt.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// producerInFlight bounds the producer's enqueues in flight (and sizes its
// pool), so that the rate holds when one enqueue takes longer than the
// interval between two.
const producerInFlight = 8

// produce enqueues jobs at the configured rate, up to producerInFlight at
// a time, until ctx ends, and returns once the last one has.
func (rt *runtimeLoad) produce(ctx context.Context) {
	tick := time.NewTicker(time.Second / time.Duration(rt.cfg.workerRate))
	defer tick.Stop()
	slots := make(chan struct{}, producerInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, kind := rt.nextRequest()
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			rt.enqueue(req, kind)
		}()
	}
}

func (rt *runtimeLoad) pickKind() string {
	n := rt.rng.Intn(10000)
	for _, k := range workKinds {
		if n < k.weight {
			return k.name
		}
		n -= k.weight
	}
	return "ok"
}

// nextRequest is the producer's next job (on its goroutine: it owns the
// random source).
func (rt *runtimeLoad) nextRequest() (jobs.EnqueueRequest, string) {
	rt.seq++
	kind := rt.pickKind()
	payload, _ := json.Marshal(workPayload{Kind: kind, N: rt.seq})
	req := jobs.EnqueueRequest{JobType: workType, JobID: uuid.Must(uuid.NewV7()), Payload: payload}
	if kind == "timeout" {
		req.TimeoutSeconds, req.MaxAttempts = ptr[int32](1), ptr[int32](2)
	}
	return req, kind
}

// enqueue enqueues one job, retrying with the same request (and id).
func (rt *runtimeLoad) enqueue(req jobs.EnqueueRequest, kind string) {
	var res jobs.EnqueueResult
	failed, err := rt.producer.do(opWorkEnqueue, func(ctx context.Context) (err error) {
		res, err = jobs.Enqueue(ctx, rt.producer.pool, req)
		return err
	})
	if err != nil {
		rt.st.failure("%s: %s", opWorkEnqueue, describe(err))
		return
	}
	if res.Disposition != runledger.DispositionInserted && failed == 0 {
		rt.st.failure("%s %s: %s at the first attempt, want inserted", opWorkEnqueue, req.JobID, res.Disposition)
		return
	}
	rt.acks.add(ack{kind: ackWorkEnqueued, job: req.JobID, key: kind})
	rt.mu.Lock()
	rt.enqueued[kind]++
	rt.mu.Unlock()
	rt.st.op(opWorkEnqueue)
}

func ptr[T any](v T) *T { return &v }

// handle is the handler of every worker job; see workKinds.
func (rt *runtimeLoad) handle(ctx context.Context, pool *pgxpool.Pool, j worker.Job[workPayload]) (any, error) {
	switch j.Payload.Kind {
	case "terminal":
		return nil, worker.Terminal(errors.New("soak: a terminal failure"))
	case "panic":
		panic("soak: a handler panic")
	case "timeout":
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if _, err := pool.Exec(ctx, `INSERT INTO soak_effects (job_id, attempt) VALUES ($1, $2)`, j.Record.ID, j.Record.Attempt); err != nil {
		return nil, worker.RetryAfter(0, fmt.Errorf("soak: record the side effect: %w", err))
	}
	switch j.Payload.Kind {
	case "ok", "retry":
		if j.Payload.Kind == "retry" && j.Record.Attempt == 1 {
			return nil, worker.RetryAfter(0, errors.New("soak: fails its first attempt"))
		}
		if err := work(ctx, time.Duration(5+j.Payload.N%16)*time.Millisecond); err != nil {
			return nil, err
		}
	case "slow":
		if err := work(ctx, 200*time.Millisecond+time.Duration(j.Payload.N%9)*100*time.Millisecond); err != nil {
			return nil, err
		}
	case "long":
		const steps = 10
		for i := int64(1); i <= steps; i++ {
			if err := work(ctx, rt.cfg.workerLease/4); err != nil {
				return nil, err
			}
			if err := worker.SetProgress(ctx, i, steps); err != nil {
				return nil, err
			}
		}
	}
	return map[string]bool{"ok": true}, nil
}

// work stands for a handler's work: it takes d, or until ctx ends.
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finished is the worker's OnFinished.
func (rt *runtimeLoad) finished(f worker.Finished) {
	switch f.Outcome {
	case worker.OutcomeSucceeded:
		rt.acks.add(ack{kind: ackWorkSucceeded, job: f.Job.ID})
		rt.st.op(opWorkSucceeded)
	case worker.OutcomeDeadLettered:
		rt.acks.add(ack{kind: ackWorkDead, job: f.Job.ID})
		rt.st.op(opWorkDead)
	case worker.OutcomeRetried:
		rt.st.op(opWorkRetried)
	case worker.OutcomeLost:
		rt.st.opN(cntWorkLost, 1)
	}
}

// drain waits, once the load has ended, until no job of workType is
// PENDING or LEASED (the worker still runs), for at most limit.
func (rt *runtimeLoad) drain(ctx context.Context, monitor *pgxpool.Pool, limit time.Duration) {
	start := time.Now()
	for {
		var left int64
		err := monitor.QueryRow(ctx, `SELECT count(*) FROM job_queue WHERE job_type = $1 AND status IN ('PENDING', 'LEASED')`, workType).Scan(&left)
		if err == nil && left == 0 {
			rt.mu.Lock()
			rt.drained = time.Since(start)
			rt.mu.Unlock()
			return
		}
		if time.Since(start) > limit {
			rt.mu.Lock()
			rt.drainErr = fmt.Errorf("%d worker jobs still PENDING or LEASED %s after the load ended (last error: %v)", left, limit, err)
			rt.mu.Unlock()
			return
		}
		time.Sleep(200 * time.Millisecond) // polling the ledger
	}
}

// logWatch is the worker's slog.Handler: it counts the records of level
// warning and above by level and message, with the first and last time
// each was seen, and drops the rest.
type logWatch struct {
	mu   sync.Mutex
	recs map[logKey]*errAgg
}

type logKey struct{ level, msg string }

func newLogWatch() *logWatch { return &logWatch{recs: map[logKey]*errAgg{}} }

func (h *logWatch) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *logWatch) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := logKey{r.Level.String(), r.Message}
	a := h.recs[k]
	if a == nil {
		a = &errAgg{first: r.Time}
		h.recs[k] = a
	}
	a.count++
	a.last = r.Time
	return nil
}

func (h *logWatch) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logWatch) WithGroup(string) slog.Handler      { return h }

// expectedLog is a worker log record the load causes on purpose, wherever
// it falls: the panic kind's.
const expectedLog = "runledger worker: a handler panicked"
