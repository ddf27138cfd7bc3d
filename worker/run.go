package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/lease"
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
	// limits are the per-type concurrency limits (MaxConcurrent) below
	// Concurrency; unlimited types are types minus these.
	limits    map[string]int
	unlimited []string
	// limitHit: the last claim passed over a limited type at its limit,
	// so a freed slot (perhaps that type's) is a reason to claim again.
	// Only the fetcher uses it.
	limitHit bool
	// fp is the worker id's fingerprint, what log records name: the id
	// itself fences the worker's writes and is kept out of logs.
	fp string

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
	inUse  map[string]int // slots held per limited type

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

	// ctx and cancel are the handler's context and its cancel, set before
	// the handler's goroutine starts (the heartbeat reads cancel).
	ctx     context.Context
	cancel  context.CancelCauseFunc
	lost    atomic.Bool
	settled atomic.Bool // its outcome was handed to the committer
	// holds counts what keeps the attempt's handler slot taken: its
	// handler until it returns, and its outcome until it is committed (or
	// known lost). The slot is freed when both are done.
	holds atomic.Int32

	mu            sync.Mutex
	progressDone  *int64
	progressTotal *int64
	checkpoint    json.RawMessage
	dirty         bool
	version       int
	leaseUntil    time.Time
	settledAt     time.Time

	// The outcome, set by whoever settled it: output on success, failure
	// on a failed attempt, handBack for an attempt the shutdown canceled
	// (released without spending it).
	output   json.RawMessage
	failure  *lease.FailRequest
	handBack bool
	err      error
	duration time.Duration
	// rewritten is set once a failure the database refused was cleaned and
	// sent again: a second refusal gives the attempt up.
	rewritten bool
}

func newRun(w *Worker, handlers map[string]handler, types []string, limits map[string]int) *run {
	r := &run{
		pool: w.pool, cfg: w.cfg, log: w.cfg.Logger, handlers: handlers, types: types, fp: Fingerprint(w.cfg.WorkerID),
		limits: limits, inUse: map[string]int{},
		wake: make(chan struct{}, 1), freed: make(chan struct{}, 1),
		active: map[uuid.UUID]*execution{}, free: w.cfg.Concurrency,
		outcomes: make(chan *execution, w.cfg.Concurrency+maxClaim),
		drain:    make(chan struct{}), stopped: make(chan struct{}),
	}
	for _, t := range types {
		if _, ok := limits[t]; !ok {
			r.unlimited = append(r.unlimited, t)
		}
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
	r.log.Info("runledger worker started", "worker", r.fp, "types", r.types, "concurrency", r.cfg.Concurrency)

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
	if !r.cfg.DisableSchedules {
		bg.Add(1)
		go func() { defer bg.Done(); r.fireSchedules(ctx) }()
	}
	go func() { defer close(fetched); r.fetch(ctx.Done()) }()

	<-ctx.Done()
	stoppedAt := time.Now()
	// The hard stop: past it no database call of this Run goes on, so that
	// Run returns in time also when the server stops answering.
	hardStop := time.AfterFunc(r.cfg.ShutdownTimeout+ShutdownGrace, r.cancelDB)
	defer hardStop.Stop()
	<-fetched
	r.log.Info("runledger worker shutting down", "worker", r.fp, "running", r.running())
	if !waitFor(&r.handlersWG, time.Until(stoppedAt.Add(r.cfg.ShutdownTimeout))) {
		r.log.Warn("runledger worker: handlers still running after the shutdown timeout; canceling them",
			"worker", r.fp, "running", r.running())
		r.cancelHandlers(errShutdown)
		if !waitFor(&r.handlersWG, abandonGrace) {
			r.log.Error("runledger worker: handlers ignored their canceled context; their jobs stay leased until recovery",
				"worker", r.fp, "running", r.running())
		}
	}
	close(r.drain)
	<-committed
	close(beatStop)
	bg.Wait()
	r.log.Info("runledger worker stopped", "worker", r.fp)
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
			var freed <-chan struct{} // nil: never ready
			if r.limitHit {
				freed = r.freed
			}
			select {
			case <-stop:
				t.Stop()
				return
			case <-r.wake:
			case <-freed:
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
		sent := time.Now()
		ctx, cancel := r.bounded(sent.Add(r.cfg.Lease))
		claimed, err := r.claim(ctx, free)
		cancel()
		if err != nil {
			r.log.Warn("runledger worker: claim failed; retrying", "worker", r.fp, "err", err)
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
			r.start(j, sent)
		}
		if len(unstarted) > 0 {
			r.handBack(unstarted)
		}
		again = len(claimed) > 0
	}
}

// claim leases up to free jobs: without per-type limits, one claim of
// every registered type; with them, first a claim of each limited type
// that has free slots for at most as many (in type order), then one of
// the unlimited types for the slots left. Each claim is a transaction of
// its own; the jobs of the claims that succeeded are returned with the
// first error, so that they are started (or handed back) rather than
// left leased.
func (r *run) claim(ctx context.Context, free int) ([]runledger.Job, error) {
	free = min(free, maxClaim)
	if len(r.limits) == 0 {
		return lease.Claim(ctx, r.pool, lease.ClaimRequest{
			WorkerID: r.cfg.WorkerID, JobTypes: r.types, Limit: free, Lease: r.cfg.Lease,
		})
	}
	var all []runledger.Job
	r.limitHit = false
	for _, t := range r.types {
		limit, ok := r.limits[t]
		if !ok || free == 0 {
			continue
		}
		r.mu.Lock()
		n := min(free, limit-r.inUse[t])
		r.mu.Unlock()
		if n <= 0 {
			r.limitHit = true
			continue
		}
		got, err := lease.Claim(ctx, r.pool, lease.ClaimRequest{
			WorkerID: r.cfg.WorkerID, JobTypes: []string{t}, Limit: n, Lease: r.cfg.Lease,
		})
		if err != nil {
			return all, err
		}
		all = append(all, got...)
		free -= len(got)
	}
	if free > 0 && len(r.unlimited) > 0 {
		got, err := lease.Claim(ctx, r.pool, lease.ClaimRequest{
			WorkerID: r.cfg.WorkerID, JobTypes: r.unlimited, Limit: free, Lease: r.cfg.Lease,
		})
		all = append(all, got...)
		return all, err
	}
	return all, nil
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
// sent is when the claim was sent: the lease's end is counted from it with
// the length the database gave the lease (see leaseEndFrom).
func (r *run) start(j runledger.Job, sent time.Time) {
	e := &execution{job: j, scope: j.Scope(), start: time.Now(), leaseUntil: r.leaseEndFrom(sent, j.StartedAt, j.LeaseExpiresAt)}
	e.holds.Store(2)
	e.ctx, e.cancel = context.WithCancelCause(r.handlerBase)
	r.mu.Lock()
	r.free--
	if _, ok := r.limits[j.JobType]; ok {
		r.inUse[j.JobType]++
	}
	r.active[j.ID] = e
	r.mu.Unlock()
	r.handlersWG.Add(1)
	go r.execute(e)
}

// leaseEndFrom is the worker's estimate of when a lease ends: the
// database's own length of the lease (its lease_expires_at minus the
// database time it was granted at, both read from the database's clock),
// counted from sent, the local time the statement was sent (before the
// database's clock read), less a safety margin. The process's clock is
// only ever used to measure an interval, never compared with the
// database's. Without the database's times it is the requested lease.
func (r *run) leaseEndFrom(sent time.Time, grantedAt, expiresAt *time.Time) time.Time {
	length := r.cfg.Lease
	if grantedAt != nil && expiresAt != nil {
		length = min(length, expiresAt.Sub(*grantedAt))
	}
	return sent.Add(length - r.leaseMargin())
}

// leaseMargin is how long before a lease's estimated end the worker treats
// it as gone: a tenth of the lease, at most a second.
func (r *run) leaseMargin() time.Duration { return min(r.cfg.Lease/10, time.Second) }

// release drops one of e's holds on its handler slot, freeing the slot
// with the last one.
func (r *run) release(e *execution) {
	if e.holds.Add(-1) == 0 {
		r.freeSlot(e.job.JobType)
	}
}

// execute runs one handler and settles its outcome, unless a watchdog
// settled it first (a handler far past its deadline).
func (r *run) execute(e *execution) {
	defer r.handlersWG.Done()
	defer r.release(e)
	timeout := time.Duration(e.job.TimeoutSeconds) * time.Second
	deadline := e.start.Add(timeout)
	hctx, cancelDeadline := context.WithDeadlineCause(e.ctx, deadline, errTimedOut)
	defer cancelDeadline()
	defer e.cancel(nil)
	ctx := context.WithValue(hctx, execKey{}, e)
	watchdog := time.AfterFunc(timeout+abandonGrace, func() {
		r.settle(e, nil, &lease.FailRequest{Kind: runledger.FailureTimeout, ErrorCode: CodeTimeout,
			ErrorMessage: fmt.Sprintf("the handler ran past its timeout of %s and did not return", timeout)}, errTimedOut)
		r.log.Error("runledger worker: a handler did not return after its timeout; its attempt is failed as TIMEOUT",
			"worker", r.fp, "job_id", e.job.ID, "job_type", e.job.JobType)
	})
	out, panicked, err := r.call(ctx, e)
	watchdog.Stop()
	cause := context.Cause(hctx)
	// A handler that returns at or after its deadline timed out, whatever
	// it returned: the deadline is part of the attempt's contract.
	late := errors.Is(cause, errTimedOut) || !time.Now().Before(deadline)
	switch {
	case panicked != nil:
		r.settle(e, nil, &lease.FailRequest{Kind: runledger.FailurePanicked, ErrorCode: CodePanicked,
			ErrorMessage: clip(fmt.Sprintf("panic: %v", panicked))}, fmt.Errorf("worker: handler panicked: %v", panicked))
	case late && !errors.Is(cause, errShutdown):
		msg := fmt.Sprintf("the handler returned after its timeout of %s", timeout)
		herr := errTimedOut
		if err != nil {
			msg = fmt.Sprintf("the handler ran past its timeout of %s: %v", timeout, err)
			herr = err
		}
		r.settle(e, nil, &lease.FailRequest{Kind: runledger.FailureTimeout, ErrorCode: CodeTimeout, ErrorMessage: clip(msg)}, herr)
	case err == nil:
		r.settle(e, out, nil, nil)
	case errors.Is(cause, errShutdown):
		// Canceled by the shutdown: handed back without spending the
		// attempt, never failed (a failure on the last attempt would
		// dead-letter the job).
		r.settleHandBack(e, err)
	default:
		f := &lease.FailRequest{Kind: runledger.FailureRetryable, ErrorCode: errorCode(err), ErrorMessage: clip(err.Error())}
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
			r.log.Error("runledger worker: a handler panicked", "worker", r.fp, "job_id", e.job.ID,
				"job_type", e.job.JobType, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	out, err = r.handlers[e.job.JobType](ctx, e.job)
	return out, nil, err
}

// settle checks an attempt's outcome against what the database accepts
// and hands it to the committer, once. An output, error code or message
// the library would refuse fails the attempt terminally as
// CodeOutputInvalid instead, saying what was wrong (the refused value is
// not stored), so that it never reaches a batch write.
func (r *run) settle(e *execution, output json.RawMessage, failure *lease.FailRequest, err error) {
	if !e.settled.CompareAndSwap(false, true) {
		return
	}
	e.mu.Lock()
	done, total := e.progressDone, e.progressTotal
	var checkpoint json.RawMessage
	if e.dirty {
		checkpoint = e.checkpoint
	}
	e.mu.Unlock()
	if failure == nil {
		req := lease.CompleteRequest{WorkerID: r.cfg.WorkerID, Output: output, ProgressDone: done, ProgressTotal: total}
		if verr := req.Validate(); verr != nil {
			output, failure = nil, outputInvalid("the handler's output was refused", verr)
			err = errors.Join(err, verr)
		}
	} else {
		req := *failure
		req.WorkerID = r.cfg.WorkerID
		if verr := req.Validate(); verr != nil {
			failure = outputInvalid("the handler's error was refused", verr)
			err = errors.Join(err, verr)
		} else if len(failure.ErrorCode) > maxErrorCode {
			failure = outputInvalid("the handler's error was refused",
				fmt.Errorf("its error code is %d bytes, over the %d the worker stores", len(failure.ErrorCode), maxErrorCode))
		}
	}
	if failure != nil {
		// The progress and checkpoint reported before the failure are
		// written with it, so that the retry can resume from them (a
		// checkpoint a heartbeat already wrote is not sent again). Both
		// were validated when the handler reported them.
		f := *failure
		f.ProgressDone, f.ProgressTotal, f.Checkpoint = done, total, checkpoint
		failure = &f
	}
	r.hand(e, output, failure, false, err)
}

// settleHandBack hands an attempt the shutdown canceled to the committer,
// to be released without spending it.
func (r *run) settleHandBack(e *execution, err error) {
	if !e.settled.CompareAndSwap(false, true) {
		return
	}
	r.hand(e, nil, nil, true, err)
}

// hand passes a settled outcome to the committer.
func (r *run) hand(e *execution, output json.RawMessage, failure *lease.FailRequest, handBack bool, err error) {
	e.mu.Lock()
	e.output, e.failure, e.handBack, e.err, e.duration = output, failure, handBack, err, time.Since(e.start)
	e.settledAt = time.Now()
	e.mu.Unlock()
	select {
	case r.outcomes <- e:
	case <-r.stopped:
	}
}

// outputInvalid is the terminal failure of an attempt whose outcome the
// database would refuse; its message says why (the library's validation
// detail, which never quotes the value).
func outputInvalid(what string, why error) *lease.FailRequest {
	msg := why.Error()
	var re *runledger.Error
	if errors.As(why, &re) && re.Detail != "" {
		msg = string(re.Code) + ": " + re.Detail
	}
	return &lease.FailRequest{Kind: runledger.FailureTerminal, ErrorCode: CodeOutputInvalid, ErrorMessage: clip(what + ": " + msg)}
}

// freeSlot returns a handler slot of a job of jobType.
func (r *run) freeSlot(jobType string) {
	r.mu.Lock()
	r.free++
	if _, ok := r.limits[jobType]; ok {
		r.inUse[jobType]--
	}
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
	slices.SortFunc(js, compareLease)
	reqs := make([]lease.ReleaseRequest, len(js))
	for i, j := range js {
		s := j.Scope()
		reqs[i] = lease.ReleaseRequest{Scope: &s, JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: r.cfg.WorkerID}
	}
	var bo backoff
	// Past the end of the leases there is nothing left to hand back.
	until := time.Now().Add(r.cfg.Lease)
	for attempt := 1; ; attempt++ {
		ctx, cancel := r.bounded(until)
		_, err := lease.Release(ctx, r.pool, reqs)
		cancel()
		if err == nil {
			return
		}
		if attempt == 5 || errors.Is(err, runledger.ErrCommitUnconfirmed) || r.db.Err() != nil || time.Now().After(until) {
			// A release that may have landed is not repeated (the lease may
			// be another's by now); an unreleased job is recovered when its
			// lease expires.
			r.log.Warn("runledger worker: handing back unstarted jobs failed; they are recovered when their leases expire",
				"worker", r.fp, "jobs", len(reqs), "err", err)
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
