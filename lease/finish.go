package lease

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// CompleteRequest finishes a leased job successfully.
type CompleteRequest struct {
	// Scope, when set, is the caller's tenant: a job in another scope is
	// runledger.CodeJobNotFound and is not changed, whatever lease the
	// request names, exactly as on every scoped path (Global matches only
	// jobs without an organization). nil is unscoped: the lease alone
	// identifies the job, whatever its tenant; see the package
	// documentation for what that trusts.
	Scope *runledger.Scope
	// JobID, RunNumber, Attempt and WorkerID must match the job's current
	// lease (as returned by Claim); run and attempt are not validated, a
	// value that cannot match is a lease mismatch.
	JobID     uuid.UUID
	RunNumber int32
	Attempt   int32
	WorkerID  string
	// Output is the result as any JSON value; nil stores NULL.
	Output json.RawMessage
	// MaxOutputBytes caps len(Output) for this call; zero (or negative)
	// means runledger.DefaultMaxJSONBytes.
	MaxOutputBytes int
	// ProgressDone and ProgressTotal, when set, record the final progress;
	// nil keeps the stored value.
	ProgressDone  *int64
	ProgressTotal *int64
}

// Validate checks the request without touching the database: worker id
// (job.worker_id_blank, job.worker_id_invalid), output
// (job.output_too_large: over MaxOutputBytes; job.output_invalid: not JSON,
// or JSON jsonb cannot store) and progress (job.progress_invalid:
// negative, or done above total when both are given).
func (r CompleteRequest) Validate() error {
	if err := validateLeaseScope(r.Scope, r.WorkerID); err != nil {
		return err
	}
	if r.Output != nil {
		if max := validate.JSONLimit(r.MaxOutputBytes); len(r.Output) > max {
			return validate.Invalid(errOutputTooLarge, "job output must be at most %d bytes, got %d", max, len(r.Output))
		}
		if err := validate.JSONB(r.Output); err != nil {
			return validate.Invalid(errOutputInvalid, "job output: %v", err)
		}
	}
	return validateProgress(r.ProgressDone, r.ProgressTotal)
}

func validateProgress(done, total *int64) error {
	switch {
	case done != nil && *done < 0, total != nil && *total < 0:
		return validate.Invalid(errProgressInvalid, "progress must not be negative")
	case done != nil && total != nil && *done > *total:
		return validate.Invalid(errProgressInvalid, "progress done %d exceeds total %d", *done, *total)
	}
	return nil
}

func (r CompleteRequest) lease() heldLease {
	return heldLease{Scope: r.Scope, JobID: r.JobID, RunNumber: r.RunNumber, Attempt: r.Attempt, WorkerID: r.WorkerID}
}

// Complete marks a leased job SUCCEEDED in one statement on the pool and
// returns it as stored: one SUCCEEDED event, finished_at set,
// lease_expires_at cleared, the execution resource claim released. (On
// Citus: the write, then its event, in one transaction of two round trips;
// see docs/SCALING.md.)
//
// It is compare-and-set on the lease: LEASED at this run and attempt to
// this worker, the lease not expired by the database clock (even before
// recovery took it back), and in req.Scope when one is given. Otherwise
// nothing is written and an unlocked read tells why:
// runledger.CodeJobNotFound (no such id, or none in the scope), else
// runledger.CodeLeaseMismatch, whose detail names the job's status, run
// and attempt (or that the lease expired) only when scoped and never the
// worker holding the job (see the package documentation). Completing twice
// is a lease mismatch the second time.
//
// When the statement was sent and its reply lost (the connection dropped,
// or ctx ended and the server did not answer the cancel in time), the job
// may or may not be completed: the error matches
// runledger.ErrCommitUnconfirmed. Read the job back (inspect.Get) to learn which;
// a blind retry answers a lease mismatch if the first call won.
func Complete(ctx context.Context, pool *pgxpool.Pool, req CompleteRequest) (runledger.Job, error) {
	return txn.OwnedWrite(ctx, pool, "job completion", req, completeOne)
}

// CompleteTx is Complete inside the caller's transaction, which it never
// commits or rolls back; the job stays locked until it ends. Under
// REPEATABLE READ or SERIALIZABLE a job changed by a concurrent committed
// transaction fails with a Transient serialization error.
func CompleteTx(ctx context.Context, tx pgx.Tx, req CompleteRequest) (runledger.Job, error) {
	return txn.JoinedWrite(ctx, tx, "job completion", req, completeOne)
}

// CompleteMany completes a batch of leased jobs (1 to runledger.MaxLimit, each job
// once, every entry validated first) in one statement on the pool, each
// fenced on its lease as Complete is. It returns one result per entry, in
// order: the job as stored, or runledger.CodeLeaseMismatch for an entry
// whose lease is not held (nothing is written for it; the batch does not
// read why). A lost reply is runledger.ErrCommitUnconfirmed for the whole
// batch.
func CompleteMany(ctx context.Context, pool *pgxpool.Pool, reqs []CompleteRequest) ([]Result[runledger.Job], error) {
	return ownedBatch(ctx, pool, "job completion", reqs, CompleteRequest.lease, completeMany)
}

// CompleteManyTx is CompleteMany inside the caller's transaction, which it
// never commits or rolls back.
func CompleteManyTx(ctx context.Context, tx pgx.Tx, reqs []CompleteRequest) ([]Result[runledger.Job], error) {
	return joinedBatch(ctx, tx, "job completion", reqs, CompleteRequest.lease, completeMany)
}

func completeOne(ctx context.Context, s *txn.Session, req CompleteRequest) (runledger.Job, error) {
	results, err := completeMany(ctx, s, []CompleteRequest{req})
	return one(ctx, s, "complete", req.lease(), results, err)
}

func completeMany(ctx context.Context, s *txn.Session, reqs []CompleteRequest) ([]Result[runledger.Job], error) {
	leases := leasesOf(reqs, CompleteRequest.lease)
	groups, err := groupByTenant(ctx, s, leases)
	if err != nil {
		return nil, err
	}
	params := func(g tenantGroup) db.JobCompleteManyParams {
		var a leaseArrays
		p := db.JobCompleteManyParams{OrganizationID: g.tenant}
		for _, i := range g.at {
			r := reqs[i]
			a.add(leases[i])
			p.Outputs = append(p.Outputs, r.Output)
			p.ProgressDone = append(p.ProgressDone, orKeep(r.ProgressDone))
			p.ProgressTotal = append(p.ProgressTotal, orKeep(r.ProgressTotal))
		}
		p.Ids, p.RunNumbers, p.Attempts, p.WorkerIds = a.ids, a.runs, a.attempts, a.workerIDs
		return p
	}
	// Citus needs its own form: the one-server statement locks its rows in
	// a CTE, which Citus cannot run in one step. Asked once per process.
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	var rs []db.JobCompleteManyRow
	if dist {
		// On Citus the completion and its events are two statements, each
		// run in one step on the tenant's shard (JobCompleteManyRouted).
		rs, err = writeGroupsThenEvents(ctx, s, "complete jobs", groups, func(q db.DBTX, g tenantGroup) ([]db.JobCompleteManyRow, error) {
			got, err := queries.JobCompleteManyRouted(ctx, q, db.JobCompleteManyRoutedParams(params(g)))
			out := make([]db.JobCompleteManyRow, len(got))
			for i, r := range got {
				out[i] = db.JobCompleteManyRow(r)
			}
			return out, err
		}, func(g tenantGroup, rs []db.JobCompleteManyRow) func(q db.DBTX) error {
			e := db.JobEventSucceededManyParams{OrganizationID: g.tenant}
			for _, r := range rs {
				e.Ids = append(e.Ids, r.ID)
				e.RunNumbers = append(e.RunNumbers, r.RunNumber)
				e.Attempts = append(e.Attempts, r.Attempt)
				e.Stages = append(e.Stages, r.Stage)
				e.ProgressDone = append(e.ProgressDone, orKeep(r.ProgressDone))
				e.ProgressTotal = append(e.ProgressTotal, orKeep(r.ProgressTotal))
				e.WorkerIds = append(e.WorkerIds, derefString(r.WorkerID))
			}
			return func(q db.DBTX) error { return queries.JobEventSucceededMany(ctx, q, e) }
		})
	} else {
		rs, err = writeGroups(ctx, s, "complete jobs", groups, func(q db.DBTX, g tenantGroup) ([]db.JobCompleteManyRow, error) {
			return queries.JobCompleteMany(ctx, q, params(g))
		})
	}
	if err != nil {
		return nil, err
	}
	return byID("complete", leases, rs, func(r db.JobCompleteManyRow) uuid.UUID { return r.ID },
		func(r db.JobCompleteManyRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
}

// orKeep is a progress value for the batch statements: -1 keeps the
// stored value.
func orKeep(v *int64) int64 {
	if v == nil {
		return -1
	}
	return *v
}

// FailRequest records a failed attempt of a leased job.
type FailRequest struct {
	// Scope, when set, is the caller's tenant and nil is unscoped, as for
	// CompleteRequest.
	Scope *runledger.Scope
	// JobID, RunNumber, Attempt and WorkerID must match the job's current
	// lease, as for CompleteRequest.
	JobID     uuid.UUID
	RunNumber int32
	Attempt   int32
	WorkerID  string
	// ErrorCode and ErrorMessage are stored as last_error_code and
	// last_error_message and in the event; "" stores NULL.
	ErrorCode    string
	ErrorMessage string
	// Terminal dead-letters the job at once, whatever attempts remain.
	Terminal bool
	// Kind is the failure kind the event records: "" means
	// runledger.FailureTerminal when Terminal is set, else
	// runledger.FailureRetryable. runledger.FailurePanicked dead-letters
	// the job like Terminal; runledger.FailureTimeout is retryable. Lease
	// expiry is recovery's to record (RecoverExpiredLeases), not a
	// request's.
	Kind runledger.FailureKind
	// RetryDelay is how long until a retry is due; nil means
	// Backoff(Attempt). Zero makes the retry due at once. Ignored when the
	// job is dead-lettered.
	RetryDelay *time.Duration
	// ProgressDone and ProgressTotal, when set, record the attempt's last
	// progress with the failure (and in its event); nil keeps the stored
	// value. Checkpoint, when not nil, is stored as the job's checkpoint,
	// so that the retry resumes from it (at most MaxCheckpointBytes, as a
	// heartbeat's). A worker passes what the handler reported after its
	// last heartbeat here, so nothing reported before a failure is lost.
	ProgressDone       *int64
	ProgressTotal      *int64
	Checkpoint         json.RawMessage
	MaxCheckpointBytes int
}

// Validate checks the request without touching the database: worker id
// (job.worker_id_blank, job.worker_id_invalid), error code and message
// (job.failure_invalid: NUL or invalid UTF-8), retry delay
// (job.retry_delay_invalid: negative), progress (job.progress_invalid) and
// checkpoint (job.checkpoint_too_large, job.checkpoint_invalid), as a
// heartbeat's.
func (r FailRequest) Validate() error {
	if err := validateLeaseScope(r.Scope, r.WorkerID); err != nil {
		return err
	}
	if !validate.Clean(r.ErrorCode) || !validate.Clean(r.ErrorMessage) {
		return validate.Invalid(errFailureInvalid, "failure error code or message holds a NUL byte or invalid UTF-8")
	}
	if r.RetryDelay != nil && *r.RetryDelay < 0 {
		return validate.Invalid(errRetryDelayInvalid, "retry delay must not be negative, got %s", *r.RetryDelay)
	}
	switch r.Kind {
	case "", runledger.FailureRetryable, runledger.FailureTerminal, runledger.FailurePanicked, runledger.FailureTimeout:
	default:
		return validate.Invalid(errFailureInvalid, "failure kind %q is not RETRYABLE, TERMINAL, PANICKED or TIMEOUT", r.Kind)
	}
	if err := validateProgress(r.ProgressDone, r.ProgressTotal); err != nil {
		return err
	}
	return validateCheckpoint(r.Checkpoint, r.MaxCheckpointBytes)
}

func (r FailRequest) lease() heldLease {
	return heldLease{Scope: r.Scope, JobID: r.JobID, RunNumber: r.RunNumber, Attempt: r.Attempt, WorkerID: r.WorkerID}
}

// kind is the failure kind the request records, and whether it
// dead-letters the job whatever attempts remain.
func (r FailRequest) kind() (runledger.FailureKind, bool) {
	switch {
	case r.Kind == runledger.FailurePanicked:
		return r.Kind, true
	case r.Kind != "":
		return r.Kind, r.Terminal || r.Kind == runledger.FailureTerminal
	case r.Terminal:
		return runledger.FailureTerminal, true
	}
	return runledger.FailureRetryable, false
}

// Backoff bounds: the first retry waits BackoffBase, each later one twice
// as long as the one before, never more than BackoffMax.
const (
	BackoffBase = time.Second
	BackoffMax  = time.Hour
)

// Backoff returns the default delay before retrying a job whose attempt
// failed: BackoffBase * 2^(attempt-1), capped at BackoffMax, so 1s, 2s, 4s,
// ... and 1h from attempt 13 on. An attempt below 1 is treated as 1. It is
// deterministic (no jitter), so the same attempt always waits the same
// time; callers that want jitter pass FailRequest.RetryDelay.
func Backoff(attempt int32) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := BackoffBase
	for i := int32(1); i < attempt; i++ {
		d *= 2
		if d >= BackoffMax {
			return BackoffMax
		}
	}
	return d
}

// Fail records a failed attempt of a leased job in one statement on the
// pool (on Citus two round trips, as for Complete) and returns the job as
// stored after it. The lease and scope are compared, and a miss reported,
// exactly as by Complete.
//
// With attempts left (attempt < max_attempts) and a retryable kind the job
// returns to PENDING, stage scheduled, due after the retry delay, worker
// cleared, with a RETRY_SCHEDULED event; the next claim starts attempt + 1
// of the same run. Otherwise (Terminal, or kind TERMINAL or PANICKED, or
// no attempts left) it is DEAD_LETTERED (finished) with a DEAD_LETTERED
// event. Either way the error code and message are stored, the event
// records the failure kind, and the execution resource claim is released.
// A lost reply is runledger.ErrCommitUnconfirmed, as for Complete.
func Fail(ctx context.Context, pool *pgxpool.Pool, req FailRequest) (runledger.Job, error) {
	return txn.OwnedWrite(ctx, pool, "job failure", req, failOne)
}

// FailTx is Fail inside the caller's transaction, which it never commits
// or rolls back; the job stays locked until it ends.
func FailTx(ctx context.Context, tx pgx.Tx, req FailRequest) (runledger.Job, error) {
	return txn.JoinedWrite(ctx, tx, "job failure", req, failOne)
}

// FailMany records a batch of failed attempts (1 to runledger.MaxLimit, each job
// once, every entry validated first) in one statement on the pool, each as
// Fail does and fenced on its lease; results as CompleteMany's.
func FailMany(ctx context.Context, pool *pgxpool.Pool, reqs []FailRequest) ([]Result[runledger.Job], error) {
	return ownedBatch(ctx, pool, "job failure", reqs, FailRequest.lease, failMany)
}

// FailManyTx is FailMany inside the caller's transaction, which it never
// commits or rolls back.
func FailManyTx(ctx context.Context, tx pgx.Tx, reqs []FailRequest) ([]Result[runledger.Job], error) {
	return joinedBatch(ctx, tx, "job failure", reqs, FailRequest.lease, failMany)
}

func failOne(ctx context.Context, s *txn.Session, req FailRequest) (runledger.Job, error) {
	results, err := failMany(ctx, s, []FailRequest{req})
	return one(ctx, s, "fail", req.lease(), results, err)
}

func failMany(ctx context.Context, s *txn.Session, reqs []FailRequest) ([]Result[runledger.Job], error) {
	leases := leasesOf(reqs, FailRequest.lease)
	groups, err := groupByTenant(ctx, s, leases)
	if err != nil {
		return nil, err
	}
	params := func(g tenantGroup) db.JobFailManyParams {
		var a leaseArrays
		p := db.JobFailManyParams{OrganizationID: g.tenant}
		for _, i := range g.at {
			r := reqs[i]
			a.add(leases[i])
			kind, terminal := r.kind()
			delay := Backoff(r.Attempt)
			if r.RetryDelay != nil {
				delay = *r.RetryDelay
			}
			p.Terminal = append(p.Terminal, terminal)
			p.FailureKinds = append(p.FailureKinds, string(kind))
			p.RetryDelaySeconds = append(p.RetryDelaySeconds, delay.Seconds())
			p.ErrorCodes = append(p.ErrorCodes, r.ErrorCode)
			p.ErrorMessages = append(p.ErrorMessages, r.ErrorMessage)
			p.ProgressDone = append(p.ProgressDone, orKeep(r.ProgressDone))
			p.ProgressTotal = append(p.ProgressTotal, orKeep(r.ProgressTotal))
			p.Checkpoints = append(p.Checkpoints, r.Checkpoint)
		}
		p.Ids, p.RunNumbers, p.Attempts, p.WorkerIds = a.ids, a.runs, a.attempts, a.workerIDs
		return p
	}
	// Citus needs its own form: the one-server statement locks its rows in
	// a CTE, which Citus cannot run in one step. Asked once per process.
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	var rs []db.JobFailManyRow
	if dist {
		// On Citus the failure and its events are two statements, each run
		// in one step on the tenant's shard, as for completion.
		rs, err = writeGroupsThenEvents(ctx, s, "fail jobs", groups, func(q db.DBTX, g tenantGroup) ([]db.JobFailManyRow, error) {
			got, err := queries.JobFailManyRouted(ctx, q, db.JobFailManyRoutedParams(params(g)))
			out := make([]db.JobFailManyRow, len(got))
			for i, r := range got {
				out[i] = db.JobFailManyRow(r)
			}
			return out, err
		}, func(g tenantGroup, rs []db.JobFailManyRow) func(q db.DBTX) error {
			kinds := make(map[uuid.UUID]string, len(g.at))
			for _, i := range g.at {
				kind, _ := reqs[i].kind()
				kinds[reqs[i].JobID] = string(kind)
			}
			e := db.JobEventFailedManyParams{OrganizationID: g.tenant}
			for _, r := range rs {
				e.Ids = append(e.Ids, r.ID)
				e.RunNumbers = append(e.RunNumbers, r.RunNumber)
				e.Attempts = append(e.Attempts, r.Attempt)
				e.Stages = append(e.Stages, r.Stage)
				e.DeadLettered = append(e.DeadLettered, r.Status == db.JobStatusDEADLETTERED)
				e.FailureKinds = append(e.FailureKinds, kinds[r.ID])
				e.ErrorCodes = append(e.ErrorCodes, derefString(r.LastErrorCode))
				e.ErrorMessages = append(e.ErrorMessages, derefString(r.LastErrorMessage))
				e.ProgressDone = append(e.ProgressDone, orKeep(r.ProgressDone))
				e.ProgressTotal = append(e.ProgressTotal, orKeep(r.ProgressTotal))
				e.NextRunAts = append(e.NextRunAts, r.NextRunAt)
			}
			return func(q db.DBTX) error { return queries.JobEventFailedMany(ctx, q, e) }
		})
	} else {
		rs, err = writeGroups(ctx, s, "fail jobs", groups, func(q db.DBTX, g tenantGroup) ([]db.JobFailManyRow, error) {
			return queries.JobFailMany(ctx, q, params(g))
		})
	}
	if err != nil {
		return nil, err
	}
	return byID("fail", leases, rs, func(r db.JobFailManyRow) uuid.UUID { return r.ID },
		func(r db.JobFailManyRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
}

// derefString is *p, or "" for nil.
func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
