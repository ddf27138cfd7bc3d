package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/lease"
)

// The defaults Config's zero fields take.
const (
	DefaultConcurrency      = 100
	DefaultLease            = 30 * time.Second
	DefaultPollInterval     = time.Second
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultRecoveryInterval = 10 * time.Second
	// DefaultRetentionInterval is how often a worker with a Retention
	// tries to prune.
	DefaultRetentionInterval = time.Hour
)

// maxClaim is the most jobs one claim asks for (runledger.MaxLimit).
const maxClaim = runledger.MaxLimit

// Config configures a Worker. Every zero field takes its default.
type Config struct {
	// WorkerID names this worker in the leases it takes (default "rlw-"
	// and 32 random hex digits). Two workers must never share one: the id
	// fences the worker's writes, so that a worker finishes only the
	// attempts it leased. It is not a secret: whoever can read a running
	// job's worker id through the library (the job's record and events
	// show it) can finish its lease; the authority is database access, not
	// the id. Log records name it by its Fingerprint. New refuses an id
	// that is blank, holds a NUL byte or invalid UTF-8, or is over 255
	// bytes: every claim would be refused.
	WorkerID string
	// Concurrency is the most attempts the worker holds at once (default
	// DefaultConcurrency): claimed, running, or finished with the outcome
	// not yet committed. The worker claims only as many jobs as it has free
	// slots, and a slot is freed once the attempt's outcome is committed.
	Concurrency int
	// Lease is the lease each claim and heartbeat asks for (default
	// DefaultLease, at most lease.MaxLease). A crashed worker's jobs are
	// taken back once it runs out and a recovery runs.
	Lease time.Duration
	// HeartbeatInterval is how often the worker renews the leases it holds,
	// in one statement for all of them (default a third of Lease; it must
	// be shorter than Lease).
	HeartbeatInterval time.Duration
	// PollInterval is how long the worker waits for a notification before
	// it claims anyway (default DefaultPollInterval): the fallback that
	// finds jobs that became due without one (scheduled jobs, retries).
	PollInterval time.Duration
	// ShutdownTimeout is how long running handlers may go on once Run's
	// context ends (default DefaultShutdownTimeout); then their contexts
	// are canceled. Run returns within ShutdownTimeout plus ShutdownGrace
	// (and a second) of its context's end, also when the database stops
	// answering.
	ShutdownTimeout time.Duration
	// RecoveryInterval is how often this worker tries to recover expired
	// leases (default DefaultRecoveryInterval); one recovery runs at a time
	// across all workers and processes. Negative: this worker never
	// recovers.
	RecoveryInterval time.Duration
	// Retention, when positive, turns on the scheduled prune: every
	// RetentionInterval (and at start) the worker deletes the jobs that
	// finished more than Retention before the database clock's now (the
	// process's clock plays no part), with health.Prune over every
	// tenant (lineage families kept whole, workflow-owned jobs kept). One
	// prune runs at a time across all workers and processes
	// (health.TryPrune); it uses a second connection of the pool beside
	// the one holding its lock. Zero (the default) never prunes; negative
	// is refused.
	Retention time.Duration
	// RetentionInterval is how often the scheduled prune runs (default
	// DefaultRetentionInterval); only used with a Retention.
	RetentionInterval time.Duration
	// RetentionBatch is the scheduled prune's batch size (default
	// health.DefaultPruneBatch).
	RetentionBatch int
	// OnPruned, when set, is called after each scheduled prune this worker
	// ran to its end, with its result.
	OnPruned func(health.PruneResult)
	// DisableListen turns the LISTEN/NOTIFY wake-up off: the worker then
	// finds new jobs by polling only.
	DisableListen bool
	// DisableSchedules turns the scheduler off. On (the default), the
	// worker fires the due schedules of its registered types at every
	// PollInterval (schedules.FireDue, one transaction per round; any
	// number of workers may do so, a tick fires once) and logs, once per
	// due tick, a schedule it cannot fire (its definition missing or
	// disabled). A worker whose types have no schedule pays one cheap
	// statement per poll.
	DisableSchedules bool
	// Logger receives the worker's log records (default slog.Default()).
	Logger *slog.Logger
	// OnFinished, when set, is called once per attempt after its outcome
	// is committed (or known lost), on one goroutine, in the order the
	// outcomes were committed. It must not block for long: the next
	// commits wait for it.
	OnFinished func(Finished)
}

// maxWorkerID bounds Config.WorkerID, in bytes.
const maxWorkerID = 255

// minConns is the fewest pool connections the worker can run with: one
// for every database call it must be able to make while another holds a
// connection for good (LISTEN; the scheduled prune's lock).
func (c Config) minConns() int {
	n := 1
	if !c.DisableListen {
		n++
	}
	if c.Retention > 0 {
		n++
	}
	return n
}

// minConnsWhy says what minConns counts.
func (c Config) minConnsWhy() string {
	why := "one for claims and writes"
	if !c.DisableListen {
		why += ", one held by LISTEN"
	}
	if c.Retention > 0 {
		why += ", one held by the scheduled prune's lock"
	}
	return why
}

// errConfig is the class of a Config that New refuses.
var errConfig = errors.New("worker: invalid config")

// withDefaults returns c with every zero field at its default, or an error
// naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.WorkerID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return c, fmt.Errorf("worker: generate a worker id: %w", err)
		}
		c.WorkerID = "rlw-" + hex.EncodeToString(b[:])
	}
	switch validate.Text(c.WorkerID, maxWorkerID) {
	case validate.Blank:
		return c, fmt.Errorf("%w: WorkerID is blank", errConfig)
	case validate.Unclean:
		return c, fmt.Errorf("%w: WorkerID holds a NUL byte or invalid UTF-8", errConfig)
	case validate.TooLong:
		return c, fmt.Errorf("%w: WorkerID is %d bytes, over %d", errConfig, len(c.WorkerID), maxWorkerID)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Lease / 3
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.RecoveryInterval == 0 {
		c.RecoveryInterval = DefaultRecoveryInterval
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Concurrency < 0:
		return c, fmt.Errorf("%w: Concurrency %d is negative", errConfig, c.Concurrency)
	case c.Lease < time.Millisecond || c.Lease > lease.MaxLease:
		return c, fmt.Errorf("%w: Lease %s is not between 1ms and %s", errConfig, c.Lease, lease.MaxLease)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.Lease:
		return c, fmt.Errorf("%w: HeartbeatInterval %s must be positive and shorter than the lease %s", errConfig, c.HeartbeatInterval, c.Lease)
	case c.PollInterval < 0:
		return c, fmt.Errorf("%w: PollInterval %s is negative", errConfig, c.PollInterval)
	case c.Retention < 0:
		return c, fmt.Errorf("%w: Retention %s is negative", errConfig, c.Retention)
	case c.RetentionInterval < 0:
		return c, fmt.Errorf("%w: RetentionInterval %s is negative", errConfig, c.RetentionInterval)
	case c.RetentionBatch < 0 || c.RetentionBatch > health.MaxPruneBatch:
		return c, fmt.Errorf("%w: RetentionBatch %d is not between 0 and %d", errConfig, c.RetentionBatch, health.MaxPruneBatch)
	case c.ShutdownTimeout < 0:
		return c, fmt.Errorf("%w: ShutdownTimeout %s is negative", errConfig, c.ShutdownTimeout)
	}
	return c, nil
}
