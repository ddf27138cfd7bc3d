package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/jobs"
)

// The causes a handler's context is canceled with.
var (
	errShutdown  = errors.New("worker: shutting down")
	errTimedOut  = errors.New("worker: the job's timeout passed")
	errLeaseLost = errors.New("worker: the lease is no longer held")
	// errShutdownDeadline is the Err of an attempt given up at the hard
	// stop of a shutdown (ShutdownGrace).
	errShutdownDeadline = errors.New("worker: the shutdown's time ran out before the outcome could be written")
)

// FailpointAfterClaim fires in the fetcher once a claim returned, before
// its jobs start, with the worker id; a test that ends Run's context there
// sees the claimed jobs handed back unstarted.
const FailpointAfterClaim = "worker/after-claim"

func init() { failpoint.Declare(FailpointAfterClaim) }

// abandonGrace is how long a handler may run past its deadline, or past
// the cancel at the end of the shutdown timeout, before the worker stops
// waiting for it.
const abandonGrace = 5 * time.Second

// ShutdownGrace is how long past Config.ShutdownTimeout a shutdown may
// go on: the wait for canceled handlers and the last database writes
// share it. Then every database call still in flight is canceled (each
// returns within a second of its cancel, also when the server's host has
// stopped answering) and Run returns; an outcome or hand-back that could
// not be written by then leaves its job LEASED until its lease expires and
// a recovery takes it back.
const ShutdownGrace = abandonGrace

// run is one Run of a Worker: the state its goroutines share.
type run struct {
	pool     *pgxpool.Pool
	cfg      Config
	log      *slog.Logger
	handlers map[string]handler
	types    []string

	// db is the context of database work: it outlives Run's context, so
	// that outcomes and hand-backs are committed while shutting down, and
	// is canceled ShutdownTimeout plus ShutdownGrace after Run's context
	// ended. Every call on it also has a deadline of its own (see bounded).
	db       context.Context
	cancelDB context.CancelFunc
	// handlerBase is the parent of every handler's context, canceled with
	// errShutdown once the shutdown timeout has passed.
	handlerBase    context.Context
	cancelHandlers context.CancelCauseFunc

	wake  chan struct{} // a notification or a recovery: claim now
	freed chan struct{} // a handler slot became free

	mu     sync.Mutex
	active map[uuid.UUID]*execution // leases held: running or awaiting their commit
	free   int

	handlersWG sync.WaitGroup
	outcomes   chan *execution
	drain      chan struct{} // closed when the committer should finish
	stopped    chan struct{} // closed when Run returns
}

// execution is one attempt the worker holds.
type execution struct {
	job   runledger.Job
	scope runledger.Scope
	start time.Time

	cancel  context.CancelCauseFunc
	lost    atomic.Bool
	settled atomic.Bool // its outcome was handed to the committer

	mu            sync.Mutex
	progressDone  *int64
	progressTotal *int64
	checkpoint    json.RawMessage
	dirty         bool
	version       int
	leaseUntil    time.Time

	// The outcome, set by whoever settled it.
	output   json.RawMessage
	failure  *jobs.FailRequest
	err      error
	duration time.Duration
}

func newRun(w *Worker, handlers map[string]handler, types []string) *run {
	r := &run{
		pool: w.pool, cfg: w.cfg, log: w.cfg.Logger, handlers: handlers, types: types,
		wake: make(chan struct{}, 1), freed: make(chan struct{}, 1),
		active: map[uuid.UUID]*execution{}, free: w.cfg.Concurrency,
		outcomes: make(chan *execution, w.cfg.Concurrency+maxClaim),
		drain:    make(chan struct{}), stopped: make(chan struct{}),
	}
	return r
}

// signal asks the fetcher to claim now.
func (r *run) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *run) run(ctx context.Context) error {
	r.db, r.cancelDB = context.WithCancel(context.WithoutCancel(ctx))
	defer r.cancelDB()
	r.handlerBase, r.cancelHandlers = context.WithCancelCause(r.db)
	defer r.cancelHandlers(errShutdown)
	defer close(r.stopped)
	r.log.Info("runledger worker started", "worker_id", r.cfg.WorkerID, "types", r.types, "concurrency", r.cfg.Concurrency)

	var bg sync.WaitGroup
	beatStop := make(chan struct{})
	committed := make(chan struct{})
	fetched := make(chan struct{})
	go func() { defer close(committed); r.commit() }()
	bg.Add(1)
	go func() { defer bg.Done(); r.heartbeat(beatStop) }()
	if !r.cfg.DisableListen {
		bg.Add(1)
		go func() { defer bg.Done(); r.listen(ctx) }()
	}
	if r.cfg.RecoveryInterval > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); r.recoverLeases(ctx) }()
	}
	if r.cfg.Retention > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); r.prune(ctx) }()
	}
	go func() { defer close(fetched); r.fetch(ctx.Done()) }()

	<-ctx.Done()
	stoppedAt := time.Now()
	// The hard stop: past it no database call of this Run goes on, so that
	// Run returns in time also when the server stops answering.
	hardStop := time.AfterFunc(r.cfg.ShutdownTimeout+ShutdownGrace, r.cancelDB)
	defer hardStop.Stop()
	<-fetched
	r.log.Info("runledger worker shutting down", "worker_id", r.cfg.WorkerID, "running", r.running())
	if !waitFor(&r.handlersWG, time.Until(stoppedAt.Add(r.cfg.ShutdownTimeout))) {
		r.log.Warn("runledger worker: handlers still running after the shutdown timeout; canceling them",
			"worker_id", r.cfg.WorkerID, "running", r.running())
		r.cancelHandlers(errShutdown)
		if !waitFor(&r.handlersWG, abandonGrace) {
			r.log.Error("runledger worker: handlers ignored their canceled context; their jobs stay leased until recovery",
				"worker_id", r.cfg.WorkerID, "running", r.running())
		}
	}
	close(r.drain)
	<-committed
	close(beatStop)
	bg.Wait()
	r.log.Info("runledger worker stopped", "worker_id", r.cfg.WorkerID)
	return nil
}

// running is the number of handlers running.
func (r *run) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.Concurrency - r.free
}

// waitFor waits for wg up to d; false if it timed out.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// sleep waits d or until stop is closed; false when stopped.
func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// backoff is a retry delay that doubles from 50 ms to 5 s.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 50*time.Millisecond), 5*time.Second)
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

// fetch claims jobs while Run's context lasts: when there are free
// handlers and a notification came, the poll interval passed, or the last
// claim found work. Jobs a claim returns once stop is closed are handed
// back unstarted.
func (r *run) fetch(stop <-chan struct{}) {
	again := true
	var bo backoff
	for {
		free := r.waitFree(stop)
		if free == 0 {
			return
		}
		if !again {
			t := time.NewTimer(r.cfg.PollInterval)
			select {
			case <-stop:
				t.Stop()
				return
			case <-r.wake:
			case <-t.C:
			}
			t.Stop()
		}
		select {
		case <-stop:
			return
		default:
		}
		// A claim that takes longer than the lease it asks for is useless:
		// the leases it would take have ended.
		ctx, cancel := r.bounded(time.Now().Add(r.cfg.Lease))
		claimed, err := jobs.Claim(ctx, r.pool, jobs.ClaimRequest{
			WorkerID: r.cfg.WorkerID, JobTypes: r.types, Limit: min(free, maxClaim), Lease: r.cfg.Lease,
		})
		cancel()
		if err != nil {
			r.log.Warn("runledger worker: claim failed; retrying", "worker_id", r.cfg.WorkerID, "err", err)
			again = true
			if !sleep(stop, bo.next()) {
				return
			}
			continue
		}
		bo.reset()
		failpoint.Inject(r.db, FailpointAfterClaim, r.cfg.WorkerID)
		var unstarted []runledger.Job
		for _, j := range claimed {
			select {
			case <-stop:
				unstarted = append(unstarted, j)
				continue
			default:
			}
			if _, ok := r.handlers[j.JobType]; !ok {
				unstarted = append(unstarted, j)
				continue
			}
			r.start(j)
		}
		if len(unstarted) > 0 {
			r.handBack(unstarted)
		}
		again = len(claimed) > 0
	}
}

// waitFree waits until a handler slot is free and returns how many are;
// 0 once stop is closed.
func (r *run) waitFree(stop <-chan struct{}) int {
	for {
		r.mu.Lock()
		f := r.free
		r.mu.Unlock()
		if f > 0 {
			return f
		}
		select {
		case <-stop:
			return 0
		case <-r.freed:
		}
	}
}

// start runs a claimed job's handler in a goroutine of its own.
func (r *run) start(j runledger.Job) {
	e := &execution{job: j, scope: j.Scope(), start: time.Now(), leaseUntil: time.Now().Add(r.cfg.Lease)}
	r.mu.Lock()
	r.free--
	r.active[j.ID] = e
	r.mu.Unlock()
	r.handlersWG.Add(1)
	go r.execute(e)
}

// execute runs one handler and settles its outcome, unless a watchdog
// settled it first (a handler far past its deadline).
func (r *run) execute(e *execution) {
	defer r.handlersWG.Done()
	defer r.freeSlot()
	timeout := time.Duration(e.job.TimeoutSeconds) * time.Second
	hctx, cancel := context.WithCancelCause(r.handlerBase)
	e.cancel = cancel
	hctx, cancelDeadline := context.WithDeadlineCause(hctx, e.start.Add(timeout), errTimedOut)
	defer cancelDeadline()
	defer cancel(nil)
	ctx := context.WithValue(hctx, execKey{}, e)
	watchdog := time.AfterFunc(timeout+abandonGrace, func() {
		r.settle(e, nil, &jobs.FailRequest{Kind: runledger.FailureTimeout, ErrorCode: CodeTimeout,
			ErrorMessage: fmt.Sprintf("the handler ran past its timeout of %s and did not return", timeout)}, errTimedOut)
		r.log.Error("runledger worker: a handler did not return after its timeout; its attempt is failed as TIMEOUT",
			"worker_id", r.cfg.WorkerID, "job_id", e.job.ID, "job_type", e.job.JobType)
	})
	out, panicked, err := r.call(ctx, e)
	watchdog.Stop()
	cause := context.Cause(hctx)
	switch {
	case panicked != nil:
		r.settle(e, nil, &jobs.FailRequest{Kind: runledger.FailurePanicked, ErrorCode: CodePanicked,
			ErrorMessage: clip(fmt.Sprintf("panic: %v", panicked))}, fmt.Errorf("worker: handler panicked: %v", panicked))
	case err == nil:
		r.settle(e, out, nil, nil)
	case errors.Is(cause, errShutdown):
		r.settle(e, nil, &jobs.FailRequest{Kind: runledger.FailureRetryable, ErrorCode: CodeShutdown,
			ErrorMessage: "the worker shut down while the handler ran", RetryDelay: ptr(time.Duration(0))}, err)
	case errors.Is(cause, errTimedOut):
		r.settle(e, nil, &jobs.FailRequest{Kind: runledger.FailureTimeout, ErrorCode: CodeTimeout,
			ErrorMessage: clip(fmt.Sprintf("the handler ran past its timeout of %s: %v", timeout, err))}, err)
	default:
		f := &jobs.FailRequest{Kind: runledger.FailureRetryable, ErrorCode: errorCode(err), ErrorMessage: clip(err.Error())}
		var term *terminalError
		if errors.As(err, &term) {
			f.Kind = runledger.FailureTerminal
		}
		var ra *retryAfterError
		if errors.As(err, &ra) {
			f.RetryDelay = ptr(ra.delay)
		}
		r.settle(e, nil, f, err)
	}
}

// call runs the handler, turning a panic into its value.
func (r *run) call(ctx context.Context, e *execution) (out json.RawMessage, panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
			r.log.Error("runledger worker: a handler panicked", "worker_id", r.cfg.WorkerID, "job_id", e.job.ID,
				"job_type", e.job.JobType, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	out, err = r.handlers[e.job.JobType](ctx, e.job)
	return out, nil, err
}

// settle hands an attempt's outcome to the committer, once.
func (r *run) settle(e *execution, output json.RawMessage, failure *jobs.FailRequest, err error) {
	if !e.settled.CompareAndSwap(false, true) {
		return
	}
	e.output, e.failure, e.err, e.duration = output, failure, err, time.Since(e.start)
	select {
	case r.outcomes <- e:
	case <-r.stopped:
	}
}

// freeSlot returns a handler slot.
func (r *run) freeSlot() {
	r.mu.Lock()
	r.free++
	r.mu.Unlock()
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// forget drops an attempt whose outcome is settled for good.
func (r *run) forget(id uuid.UUID) {
	r.mu.Lock()
	delete(r.active, id)
	r.mu.Unlock()
}

// handBack releases jobs claimed but not started, without spending their
// attempt.
func (r *run) handBack(js []runledger.Job) {
	reqs := make([]jobs.ReleaseRequest, len(js))
	for i, j := range js {
		s := j.Scope()
		reqs[i] = jobs.ReleaseRequest{Scope: &s, JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: r.cfg.WorkerID}
	}
	var bo backoff
	// Past the end of the leases there is nothing left to hand back.
	until := time.Now().Add(r.cfg.Lease)
	for attempt := 1; ; attempt++ {
		ctx, cancel := r.bounded(until)
		_, err := jobs.Release(ctx, r.pool, reqs)
		cancel()
		if err == nil {
			return
		}
		if attempt == 5 || errors.Is(err, runledger.ErrCommitUnconfirmed) || r.db.Err() != nil || time.Now().After(until) {
			// A release that may have landed is not repeated (the lease may
			// be another's by now); an unreleased job is recovered when its
			// lease expires.
			r.log.Warn("runledger worker: handing back unstarted jobs failed; they are recovered when their leases expire",
				"worker_id", r.cfg.WorkerID, "jobs", len(reqs), "err", err)
			return
		}
		if !sleep(r.db.Done(), bo.next()) {
			return
		}
	}
}

// bounded returns a context for one database call: canceled at the hard
// stop of a shutdown, and with until as its deadline, so that a call to a
// server that stopped answering ends.
func (r *run) bounded(until time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(r.db, until)
}

func ptr[T any](v T) *T { return &v }

// clip makes a stored error message clean UTF-8 without NUL bytes, and
// bounds it on a rune boundary.
func clip(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= maxErrorMessage {
		return s
	}
	cut := maxErrorMessage
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}
