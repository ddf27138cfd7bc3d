package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// heldLease identifies one attempt of a job held by a worker: what
// Complete and Fail compare against the stored row, and the scope the
// caller asked for (nil: unscoped).
type heldLease struct {
	Scope     *runledger.Scope
	JobID     uuid.UUID
	RunNumber int32
	Attempt   int32
	WorkerID  string
}

// scopeParams returns the scoped flag and organization id of the finish
// statements for an optional scope.
func scopeParams(scope *runledger.Scope) (bool, *uuid.UUID) {
	if scope == nil {
		return false, nil
	}
	return true, scope.OrganizationIDPtr()
}

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
	// means DefaultMaxJSONBytes.
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
	if err := validateWorkerID(r.WorkerID); err != nil {
		return err
	}
	if r.Output != nil {
		if max := jsonLimit(r.MaxOutputBytes); len(r.Output) > max {
			return invalid(errOutputTooLarge, "job output must be at most %d bytes, got %d", max, len(r.Output))
		}
		if err := validateJSON(r.Output); err != nil {
			return invalid(errOutputInvalid, "job output: %v", err)
		}
	}
	return validateProgress(r.ProgressDone, r.ProgressTotal)
}

func validateProgress(done, total *int64) error {
	switch {
	case done != nil && *done < 0, total != nil && *total < 0:
		return invalid(errProgressInvalid, "progress must not be negative")
	case done != nil && total != nil && *done > *total:
		return invalid(errProgressInvalid, "progress done %d exceeds total %d", *done, *total)
	}
	return nil
}

// Complete marks a leased job SUCCEEDED in one statement on the pool and
// returns it as stored: one SUCCEEDED event, finished_at set,
// lease_expires_at cleared, the execution resource claim released.
//
// It is compare-and-set on the lease (LEASED at this run and attempt to
// this worker, and in req.Scope when one is given). Otherwise nothing is
// written and an unlocked read tells why: runledger.CodeJobNotFound (no
// such id, or none in the scope), else runledger.CodeLeaseMismatch, whose
// detail names the job's status, run and attempt only when scoped and
// never the worker holding the job (see the package documentation).
// Completing twice is a lease mismatch the second time.
//
// When the statement was sent and its reply lost (the connection dropped,
// or ctx ended and the server did not answer the cancel in time), the job
// may or may not be completed: the error matches
// runledger.ErrCommitUnconfirmed. Read the job back (Get) to learn which;
// a blind retry answers a lease mismatch if the first call won.
func Complete(ctx context.Context, pool *pgxpool.Pool, req CompleteRequest) (runledger.Job, error) {
	return ownedWrite(ctx, pool, "job completion", req, complete)
}

// CompleteTx is Complete inside the caller's transaction, which it never
// commits or rolls back; the job stays locked until it ends. Under
// REPEATABLE READ or SERIALIZABLE a job changed by a concurrent committed
// transaction fails with a Transient serialization error.
func CompleteTx(ctx context.Context, tx pgx.Tx, req CompleteRequest) (runledger.Job, error) {
	return joinedWrite(ctx, tx, "job completion", req, complete)
}

func complete(ctx context.Context, s *txn.Session, req CompleteRequest) (runledger.Job, error) {
	workerID := req.WorkerID
	scoped, org := scopeParams(req.Scope)
	p := db.JobCompleteParams{
		Output:         req.Output,
		ProgressDone:   req.ProgressDone,
		ProgressTotal:  req.ProgressTotal,
		ID:             req.JobID,
		RunNumber:      req.RunNumber,
		Attempt:        req.Attempt,
		WorkerID:       &workerID,
		Scoped:         scoped,
		OrganizationID: org,
	}
	row, err := txn.One(ctx, s, "complete job", func(q db.DBTX) (db.JobCompleteRow, error) {
		return queries.JobComplete(ctx, q, p)
	})
	return leaseResult(ctx, s.DB(), "complete",
		heldLease{Scope: req.Scope, JobID: req.JobID, RunNumber: req.RunNumber, Attempt: req.Attempt, WorkerID: req.WorkerID},
		db.JobQueue(row), err)
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
	// RetryDelay is how long until a retry is due; nil means
	// Backoff(Attempt). Zero makes the retry due at once. Ignored when the
	// job is dead-lettered.
	RetryDelay *time.Duration
}

// Validate checks the request without touching the database: worker id
// (job.worker_id_blank, job.worker_id_invalid), error code and message
// (job.failure_invalid: NUL or invalid UTF-8) and retry delay
// (job.retry_delay_invalid: negative).
func (r FailRequest) Validate() error {
	if err := validateWorkerID(r.WorkerID); err != nil {
		return err
	}
	if !validate.Clean(r.ErrorCode) || !validate.Clean(r.ErrorMessage) {
		return invalid(errFailureInvalid, "failure error code or message holds a NUL byte or invalid UTF-8")
	}
	if r.RetryDelay != nil && *r.RetryDelay < 0 {
		return invalid(errRetryDelayInvalid, "retry delay must not be negative, got %s", *r.RetryDelay)
	}
	return nil
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
// pool and returns the job as stored after it. The lease and scope are
// compared, and a miss reported, exactly as by Complete.
//
// With attempts left (attempt < max_attempts) and Terminal false the job
// returns to PENDING, stage scheduled, due after the retry delay, worker
// cleared, with a RETRY_SCHEDULED event; the next claim starts attempt + 1
// of the same run. Otherwise it is DEAD_LETTERED (finished) with a
// DEAD_LETTERED event. Either way the error code and message are stored
// and the execution resource claim is released. A lost reply is
// runledger.ErrCommitUnconfirmed, as for Complete.
func Fail(ctx context.Context, pool *pgxpool.Pool, req FailRequest) (runledger.Job, error) {
	return ownedWrite(ctx, pool, "job failure", req, fail)
}

// FailTx is Fail inside the caller's transaction, which it never commits
// or rolls back; the job stays locked until it ends.
func FailTx(ctx context.Context, tx pgx.Tx, req FailRequest) (runledger.Job, error) {
	return joinedWrite(ctx, tx, "job failure", req, fail)
}

func fail(ctx context.Context, s *txn.Session, req FailRequest) (runledger.Job, error) {
	delay := Backoff(req.Attempt)
	if req.RetryDelay != nil {
		delay = *req.RetryDelay
	}
	workerID := req.WorkerID
	scoped, org := scopeParams(req.Scope)
	p := db.JobFailParams{
		Terminal:          req.Terminal,
		RetryDelaySeconds: delay.Seconds(),
		ErrorCode:         optionalText(req.ErrorCode),
		ErrorMessage:      optionalText(req.ErrorMessage),
		ID:                req.JobID,
		RunNumber:         req.RunNumber,
		Attempt:           req.Attempt,
		WorkerID:          &workerID,
		Scoped:            scoped,
		OrganizationID:    org,
	}
	row, err := txn.One(ctx, s, "fail job", func(q db.DBTX) (db.JobFailRow, error) {
		return queries.JobFail(ctx, q, p)
	})
	return leaseResult(ctx, s.DB(), "fail",
		heldLease{Scope: req.Scope, JobID: req.JobID, RunNumber: req.RunNumber, Attempt: req.Attempt, WorkerID: req.WorkerID},
		db.JobQueue(row), err)
}

// leaseResult is the result of a compare-and-set on a lease (op "complete"
// or "fail"): the job as stored, or why no row matched.
func leaseResult(ctx context.Context, q db.DBTX, op string, lease heldLease, row db.JobQueue, err error) (runledger.Job, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return runledger.Job{}, classifyLeaseMiss(ctx, q, op, lease)
	}
	if err != nil {
		return runledger.Job{}, dberr.Translate(ctx, op+" job", err)
	}
	return rows.Job(row)
}

// classifyLeaseMiss explains a compare-and-set that matched no row, with an
// unlocked read. With a scope the read is scoped like the statement was (a
// job outside it is not found) and the detail names the job's status, run
// and attempt. Without one the read only tells whether the id exists, in
// any scope, so nothing else of another tenant's job can reach the error.
// Neither ever names the job's worker.
func classifyLeaseMiss(ctx context.Context, q db.DBTX, op string, want heldLease) error {
	request := fmt.Sprintf("request holds run %d attempt %d worker %q", want.RunNumber, want.Attempt, want.WorkerID)
	if want.Scope == nil {
		exists, err := queries.JobExistsAnyScope(ctx, q, want.JobID)
		if err != nil {
			return dberr.Translate(ctx, "read job after lease mismatch", err)
		}
		if !exists {
			return errs.JobNotFound.Newf("%s job: job %s does not exist", op, want.JobID)
		}
		return errs.LeaseMismatch.Newf(
			"%s job %s: the job exists but that lease is not held (%s; the job's state is shown only to a scoped request)",
			op, want.JobID, request)
	}
	actual, err := queries.JobGetByID(ctx, q, db.JobGetByIDParams{ID: want.JobID, OrganizationID: want.Scope.OrganizationIDPtr()})
	if errors.Is(err, pgx.ErrNoRows) {
		return errs.JobNotFound.Newf("%s job: job %s not found in scope %s", op, want.JobID, *want.Scope)
	}
	if err != nil {
		return dberr.Translate(ctx, "read job after lease mismatch", err)
	}
	return errs.LeaseMismatch.Newf(
		"%s job %s: job is %s at run %d attempt %d; %s",
		op, want.JobID, actual.Status, actual.RunNumber, actual.Attempt, request)
}
