package jobs

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// Size limits of a request, in bytes.
const (
	// MaxJobTypeBytes is the longest job type, in bytes of UTF-8; exactly
	// 255 bytes is valid. It keeps every index that holds a job type (the
	// keyed-enqueue index holds it beside a 512-byte key) well within
	// PostgreSQL's limit on an index row.
	MaxJobTypeBytes = 255
	// DefaultMaxJSONBytes is the limit on an enqueue's payload and a
	// completion's output when the request sets none: 1 MiB of JSON text,
	// counted as given.
	DefaultMaxJSONBytes = 1 << 20
)

// jsonLimit returns the limit a request's max field sets: max itself, or
// DefaultMaxJSONBytes when max is not positive.
func jsonLimit(max int) int {
	if max <= 0 {
		return DefaultMaxJSONBytes
	}
	return max
}

// The request-validation errors of this package, all category Validation
// and returned before any database work. Their codes are stable; match one
// with errors.Is(err, runledger.Code("job.payload_invalid")).
var (
	errJobTypeBlank = errs.Validation("job.job_type_blank",
		"Job type must not be blank.")
	errJobTypeInvalid = errs.Validation("job.job_type_invalid",
		"Job type must be valid UTF-8 without NUL bytes.")
	errJobTypeTooLong = errs.Validation("job.job_type_too_long",
		"Job type is too long (at most 255 bytes).")
	errPayloadTooLarge = errs.Validation("job.payload_too_large",
		"Job payload is too large.")
	errOutputTooLarge = errs.Validation("job.output_too_large",
		"Job output is too large.")
	errPayloadInvalid = errs.Validation("job.payload_invalid",
		"Job payload must be valid JSON.")
	errMaxAttemptsInvalid = errs.Validation("job.max_attempts_invalid",
		"Max attempts must be positive.")
	errTimeoutInvalid = errs.Validation("job.timeout_invalid",
		"Timeout seconds must be positive.")
	errRunAtInvalid = errs.Validation("job.run_at_invalid",
		"Run-at time is out of range.")
	errIdempotencyKeyInvalid = errs.Validation("job.idempotency_key_invalid",
		"Idempotency key must be non-blank UTF-8 without NUL bytes, at most 512 bytes.")
	errWorkerIDBlank = errs.Validation("job.worker_id_blank",
		"Worker id must not be blank.")
	errWorkerIDInvalid = errs.Validation("job.worker_id_invalid",
		"Worker id must be valid UTF-8 without NUL bytes.")
	errClaimLimitInvalid = errs.Validation("job.claim_limit_invalid",
		"Claim limit must be between 1 and 1000.")
	errLeaseDurationInvalid = errs.Validation("job.lease_duration_invalid",
		"Lease duration is out of range (1µs to 24h).")
	errOutputInvalid = errs.Validation("job.output_invalid",
		"Job output must be valid JSON.")
	errProgressInvalid = errs.Validation("job.progress_invalid",
		"Progress must be non-negative, with done at most total.")
	errRetryDelayInvalid = errs.Validation("job.retry_delay_invalid",
		"Retry delay must not be negative.")
	errFailureInvalid = errs.Validation("job.failure_invalid",
		"Failure error code and message must be valid UTF-8 without NUL bytes.")
	errCancelReasonInvalid = errs.Validation("job.cancel_reason_invalid",
		"Cancel reason must be valid UTF-8 without NUL bytes.")
	errEventLimitInvalid = errs.Validation("job.event_limit_invalid",
		"Event limit must be between 1 and 1000.")
	errEventFilterInvalid = errs.Validation("job.event_filter_invalid",
		"Event type is not valid.")
	errListLimitInvalid  = errs.ListLimitInvalid
	errListFilterInvalid = errs.Validation("job.list_filter_invalid",
		"Job list filter is not supported.")
	errRecoverLimitInvalid = errs.Validation("job.recover_limit_invalid",
		"Lease recovery limit must be between 1 and 1000.")
	errWorkflowTypeInvalid = errs.Validation("job.workflow_type_invalid",
		"Workflow type must be non-blank UTF-8 without NUL bytes.")
	errWorkflowStepKeyInvalid = errs.Validation("job.workflow_step_key_invalid",
		"Workflow step key must be non-blank UTF-8 without NUL bytes.")
	errWorkflowStepJobKeyed = errs.Validation("job.workflow_step_job_keyed",
		"Workflow step jobs cannot have an idempotency key.")
)

// invalid returns an error of kind whose client message says what was
// refused and why, with the limit that was broken and the value given
// (the detail, which holds only the caller's own input): "Lease duration
// is out of range (1µs to 24h): lease must be between 1µs and 24h0m0s, got
// 25h0m0s."
func invalid(kind errs.Kind, format string, args ...any) error {
	e := kind.Newf(format, args...)
	head := strings.TrimSuffix(kind.Message, ".")
	if len(e.Detail) >= len(head) && strings.EqualFold(e.Detail[:len(head)], head) {
		// The detail says it all ("max attempts must be positive, got 0").
		e.Message = head + e.Detail[len(head):] + "."
	} else {
		e.Message = head + ": " + e.Detail + "."
	}
	return e
}

// validated runs op on q once req is valid: every entry point validates
// before any database work, so an invalid request fails the same way on a
// closed pool.
func validated[R interface{ Validate() error }, T any](ctx context.Context, q db.DBTX, req R, op func(context.Context, db.DBTX, R) (T, error)) (T, error) {
	q = txn.Wrap(q)
	if err := req.Validate(); err != nil {
		var zero T
		return zero, err
	}
	return op(ctx, q, req)
}

// ownedWrite validates req, then runs op on a session of its own on pool,
// named name in error details. op's statements run with txn.One, each
// committing on its own: a reply lost after a write was sent is an error
// matching runledger.ErrCommitUnconfirmed.
func ownedWrite[R interface{ Validate() error }, T any](ctx context.Context, pool *pgxpool.Pool, name string, req R, op func(context.Context, *txn.Session, R) (T, error)) (T, error) {
	var zero T
	if err := req.Validate(); err != nil {
		return zero, err
	}
	s, err := txn.Own(ctx, pool, name)
	if err != nil {
		return zero, err
	}
	defer s.End(ctx)
	return op(ctx, s, req)
}

// joinedWrite validates req, then runs op in the caller's transaction.
func joinedWrite[R interface{ Validate() error }, T any](ctx context.Context, tx pgx.Tx, name string, req R, op func(context.Context, *txn.Session, R) (T, error)) (T, error) {
	if err := req.Validate(); err != nil {
		var zero T
		return zero, err
	}
	return op(ctx, txn.Join(tx, name), req)
}

// validateJobType checks a job type, or a job type filter: non-blank after
// trimming Unicode white space, valid UTF-8 without NUL, at most
// MaxJobTypeBytes.
func validateJobType(jobType string) error {
	switch validate.Text(jobType, MaxJobTypeBytes) {
	case validate.Blank:
		return invalid(errJobTypeBlank, "job type %q is blank", jobType)
	case validate.Unclean:
		return invalid(errJobTypeInvalid, "job type holds a NUL byte or invalid UTF-8")
	case validate.TooLong:
		return invalid(errJobTypeTooLong, "job type must be at most %d bytes, got %d", MaxJobTypeBytes, len(jobType))
	}
	return nil
}

// validateWorkerID checks a worker id like a job type, without a length
// limit.
func validateWorkerID(workerID string) error {
	switch validate.Text(workerID, 0) {
	case validate.Blank:
		return invalid(errWorkerIDBlank, "worker id %q is blank", workerID)
	case validate.Unclean:
		return invalid(errWorkerIDInvalid, "worker id holds a NUL byte or invalid UTF-8")
	}
	return nil
}

// validateLimit checks that n is between 1 and MaxLimit.
func validateLimit(n int, kind errs.Kind, what string) error {
	if n < 1 || n > MaxLimit {
		return invalid(kind, "%s must be between 1 and %d, got %d", what, MaxLimit, n)
	}
	return nil
}

// validateJSON checks that b is one JSON value that PostgreSQL's jsonb can
// store (validate.JSONB): valid UTF-8 and JSON, no \u0000 escape, no
// unpaired UTF-16 surrogate escape, every number within numeric's range.
func validateJSON(b []byte) error {
	return validate.JSONB(b)
}
