// Package worker runs jobs: a Worker claims due jobs of the types
// registered with it, runs each with its handler, keeps the leases alive
// with heartbeats, and records each attempt's outcome, all through the
// lease-fenced writes of package lease. It is a floor above the library
// (jobs, lease, replay); nothing in the library imports it.
//
// # What a Worker does
//
//   - Claims only as many jobs as it has free handler slots
//     (Config.Concurrency), and of a type registered with MaxConcurrent
//     only as many as that type has free slots (a claim of its own). A slot is taken from the claim until the
//     attempt's outcome is committed (or known lost), not only while the
//     handler runs: the leases a worker holds (claimed, running, finished
//     but not yet committed) never exceed Concurrency, and a worker whose
//     outcomes back up stops claiming. It claims up to 1,000 per
//     statement, when a committed enqueue or replay of a due
//     job notifies (LISTEN/NOTIFY, heard within milliseconds), again at
//     once after every claim that found work, and at least every
//     Config.PollInterval (jobs that became due without a notification).
//   - Runs each job's handler with the job's timeout as its context's
//     deadline. A returned error fails the attempt (retryable unless
//     Terminal; RetryAfter sets the delay), a panic fails it as PANICKED
//     (dead-lettered), a handler past its deadline as TIMEOUT (retryable,
//     also when it returns success after the deadline),
//     success completes it with the handler's output.
//   - Renews every lease it holds with one statement per
//     Config.HeartbeatInterval, carrying the progress and checkpoints
//     handlers reported (SetProgress, SetCheckpoint). A refused heartbeat
//     (the job was canceled, or the lease expired while the worker was
//     paused) cancels that handler, and nothing more is written for the
//     attempt.
//   - Records outcomes in batches, up to 1,000 per statement, as they come:
//     completions and failures are fenced on the lease, so a worker that
//     lost its lease never finishes an attempt another worker now holds.
//     Config.OnFinished hears each outcome after its commit.
//   - Sends every multi-row write (heartbeat rounds, completions,
//     failures, hand-backs) sorted by tenant, then job id, the order in
//     which the statements lock their rows, so that its own statements
//     never deadlock with each other (nor with other workers'). On Citus
//     each tenant's rows are on one shard and the tenant groups go in the
//     same order, so the order holds there too.
//   - Checks each outcome when its handler returns with the library's
//     request validation: an output, error code or message the database
//     would refuse fails the attempt terminally as CodeOutputInvalid. A
//     batch the database refuses anyway is split, down to single entries,
//     so every other outcome in it is written; a completion refused alone
//     is failed as CodeOutputInvalid, a failure refused alone is written
//     once more cleaned, then given up. Nothing is retried forever: the
//     lease of an outcome still unwritten one lease length after its
//     handler returned is no longer renewed, so a recovery takes it back.
//     A write whose reply was lost is settled by reading the job back, for
//     as long as the database cannot be reached (until the hard stop of a
//     shutdown): an outcome that landed is reported as written, never
//     lost.
//   - Decides about leases on the database clock: the lease end it
//     tracks is the length the database gave the lease (lease_expires_at
//     less the database time of the claim or heartbeat) counted from when
//     the statement was sent, less a margin (a tenth of the lease, at
//     most a second); the process's clock is never compared with the
//     database's. The scheduled prune's cutoff is the database clock's.
//   - Recovers expired leases of crashed workers every
//     Config.RecoveryInterval (one recovery at a time across processes).
//   - With a Config.Retention, prunes the jobs that finished longer ago
//     every Config.RetentionInterval (health.TryPrune: one prune at a time
//     across processes; off by default).
//
// # Shutdown
//
// When Run's context ends the worker stops claiming; running handlers get
// Config.ShutdownTimeout to finish, then their contexts are canceled; an
// attempt canceled so, and jobs claimed but not started, are handed back
// without spending their attempt (lease.Release: PENDING at the attempt
// before, due as they were; never a failure, so a shutdown never
// dead-letters a job on its last attempt); every outcome is committed;
// then Run returns. A clean shutdown leaves none of
// its jobs LEASED. A handler that ignores its canceled context keeps its
// job leased until the lease expires and a recovery takes it back.
//
// Every database call has a deadline (see ShutdownGrace): Run returns
// within Config.ShutdownTimeout plus ShutdownGrace and a second of its
// context's end, also when the server's host stops answering; what could
// not be written by then is reported lost and recovered with its lease.
//
// # Connections
//
// A Worker holds one connection of its pool for LISTEN (unless
// Config.DisableListen) and uses up to five more at once (claim, outcomes,
// heartbeats, recovery, hand-back): give its pool at least six. New
// refuses a pool that cannot run the worker at all: fewer than two
// connections (one with DisableListen), one more with a Retention (the
// scheduled prune holds its lock on one connection and prunes on another).
//
// # Who can finish a lease
//
// The worker id fences the worker's writes: a completion, failure or
// heartbeat names the job's lease (job, run, attempt, worker id) and the
// database refuses it once the lease is not that. The id is not a secret,
// though: it is stored on the running job, and whoever can read a running
// job through the library (its record, its LEASED, PROGRESS and SUCCEEDED
// events, runledger jobs show) can read it, and so can finish the lease.
// The authority to finish a job is access to the database, not the id.
// The worker's own log records name it only by its Fingerprint.
package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/validate"
)

// Worker runs jobs; see the package documentation. Create it with New,
// register handlers with Register, then call Run.
type Worker struct {
	pool *pgxpool.Pool
	cfg  Config

	mu       sync.Mutex
	handlers map[string]handler
	limits   map[string]int // per-type concurrency limits (MaxConcurrent)
	running  bool
}

// New returns a Worker on pool configured by cfg (zero fields take their
// defaults; an invalid field is an error). It touches no database.
func New(pool *pgxpool.Pool, cfg Config) (*Worker, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", errConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := pool.Config().MaxConns
	if need := c.minConns(); n < int32(need) {
		return nil, fmt.Errorf("%w: the pool allows %d connections, and the worker needs at least %d at once (%s)",
			errConfig, n, need, c.minConnsWhy())
	}
	if n < 6 {
		c.Logger.Warn("runledger worker: the pool allows fewer connections than a worker uses at once; claims and commits will wait for each other",
			"max_conns", n, "worker", Fingerprint(c.WorkerID))
	}
	return &Worker{pool: pool, cfg: c, handlers: map[string]handler{}, limits: map[string]int{}}, nil
}

// Fingerprint is the short form of a worker id that the worker's log
// records carry (the first 8 hex digits of its SHA-256): enough to tell
// workers apart and to match a worker's logs to its Worker.ID, without
// writing the id itself into logs.
func Fingerprint(workerID string) string {
	sum := sha256.Sum256([]byte(workerID))
	return hex.EncodeToString(sum[:4])
}

// ID is the worker id this worker leases jobs under.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Register makes w run jobs of jobType with h, their payload decoded from
// JSON into T, with the options given (MaxConcurrent). It must be called
// before Run; a job type registered twice, or blank, or an invalid option
// is an error.
func Register[T any](w *Worker, jobType string, h Handler[T], opts ...Option) error {
	if h == nil {
		return errors.New("worker: nil handler")
	}
	if validate.Text(jobType, 255) != validate.OK {
		return fmt.Errorf("worker: job type %q is blank, too long or not clean UTF-8", jobType)
	}
	var o options
	for _, opt := range opts {
		if opt == nil {
			return errors.New("worker: nil option")
		}
		if err := opt(&o); err != nil {
			return err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return errors.New("worker: Register after Run")
	}
	if _, ok := w.handlers[jobType]; ok {
		return fmt.Errorf("worker: job type %q is already registered", jobType)
	}
	w.handlers[jobType] = erase(h)
	if o.maxConcurrent > 0 {
		w.limits[jobType] = o.maxConcurrent
	}
	return nil
}

// Option is a per-type setting of Register.
type Option func(*options) error

type options struct {
	maxConcurrent int
}

// MaxConcurrent bounds how many jobs of the registered type this worker
// holds at once (claimed, running, or finished and not yet committed: the
// same slots Config.Concurrency counts) to n, at least 1. The worker
// claims no more of the type than it has free slots for it, so a slow or
// stuck type takes at most n of the worker's Config.Concurrency slots and
// the other types keep the rest. A limit at or above Config.Concurrency
// changes nothing. The bound is per worker: several workers may each hold
// n.
func MaxConcurrent(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: MaxConcurrent(%d): want at least 1", errConfig, n)
		}
		o.maxConcurrent = n
		return nil
	}
}

// Run runs jobs until ctx ends, then shuts down gracefully (see the
// package documentation) and returns nil. It fails at once when no handler
// is registered or the worker is already running. Database failures while
// it runs (a restart, a lost connection) are logged and retried, not
// returned.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("worker: already running")
	}
	if len(w.handlers) == 0 {
		w.mu.Unlock()
		return errors.New("worker: no handler registered")
	}
	w.running = true
	handlers := make(map[string]handler, len(w.handlers))
	types := make([]string, 0, len(w.handlers))
	for t, h := range w.handlers {
		handlers[t] = h
		types = append(types, t)
	}
	limits := make(map[string]int, len(w.limits))
	for t, n := range w.limits {
		if n < w.cfg.Concurrency {
			limits[t] = n
		}
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	sort.Strings(types)
	return newRun(w, handlers, types, limits).run(ctx)
}
