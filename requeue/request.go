package requeue

import (
	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/validate"
)

// MaxReasonBytes is the longest accepted reason, in bytes of UTF-8.
const MaxReasonBytes = 4096

// The codes of this package's errors (each a runledger.Code, so
// errors.Is(err, requeue.CodeX) holds).
const (
	// CodeUnsupportedIsolation: JobTx was given a transaction that is not a
	// read-write READ COMMITTED one.
	CodeUnsupportedIsolation runledger.Code = "job.compare_and_requeue_unsupported_isolation"
	// CodeReasonBlank, CodeReasonInvalid and CodeReasonTooLong refuse the
	// reason: blank after trimming Unicode white space, holding a NUL byte
	// or invalid UTF-8, over MaxReasonBytes.
	CodeReasonBlank   runledger.Code = "job.requeue_reason_blank"
	CodeReasonInvalid runledger.Code = "job.requeue_reason_invalid"
	CodeReasonTooLong runledger.Code = "job.requeue_reason_too_long"
	// CodeStatusInvalid refuses an expected status other than
	// DEAD_LETTERED and CANCELED (a SUCCEEDED job is replayed, not
	// requeued).
	CodeStatusInvalid runledger.Code = "job.requeue_status_invalid"
	// CodeStatePolicyInvalid refuses a state policy other than the two.
	CodeStatePolicyInvalid runledger.Code = "job.requeue_state_policy_invalid"
	// CodeTargetUnstable: the bounded lock loop gave up (see
	// MaxLockAttempts).
	CodeTargetUnstable runledger.Code = "job.requeue_target_unstable"
)

// The request-validation errors, all category Validation.
var (
	errReasonBlank = errs.Validation(CodeReasonBlank,
		"Job requeue reason must not be blank.")
	errReasonInvalid = errs.Validation(CodeReasonInvalid,
		"Job requeue reason must be valid UTF-8 without NUL bytes.")
	errReasonTooLong = errs.Validation(CodeReasonTooLong,
		"Job requeue reason is too long (at most 4096 bytes).")
	errStatusInvalid = errs.Validation(CodeStatusInvalid,
		"Only a DEAD_LETTERED or CANCELED job can be requeued; a SUCCEEDED job is replayed, not requeued.")
	errPolicyInvalid = errs.Validation(CodeStatePolicyInvalid,
		"Job requeue state policy is unknown.")
	errUnsupportedIsolation = errs.Validation(CodeUnsupportedIsolation,
		"Job compare-and-requeue requires READ COMMITTED transaction isolation.")
	errTargetUnstable = errs.Internal(CodeTargetUnstable,
		"Job requeue target kept changing; try again.")
)

// Status is the status a caller observed a requeueable job in: exactly
// DeadLettered or Canceled. Any other value (SUCCEEDED, which is
// replayed instead, PENDING, LEASED) is refused by Validate.
type Status runledger.JobStatus

// The requeueable statuses.
const (
	DeadLettered = Status(runledger.JobStatusDeadLettered)
	Canceled     = Status(runledger.JobStatusCanceled)
)

// ParseStatus returns the requeueable status s names, spelled as the
// job_status enum ("DEAD_LETTERED", "CANCELED"), or the Validation error
// job.requeue_status_invalid.
func ParseStatus(s string) (Status, error) {
	st := Status(s)
	if err := st.validate(); err != nil {
		return "", err
	}
	return st, nil
}

func (s Status) validate() error {
	switch s {
	case DeadLettered, Canceled:
		return nil
	case Status(runledger.JobStatusSucceeded):
		return errStatusInvalid.New("a SUCCEEDED job is replayed (package replay), not requeued")
	}
	return errStatusInvalid.Newf("job status %q cannot be requeued; want DEAD_LETTERED or CANCELED", string(s))
}

// StatePolicy says what a requeue does with the job's progress and
// checkpoint. The zero value keeps them.
type StatePolicy int

// The state policies.
const (
	// PreserveProgress keeps progress_done, progress_total and checkpoint,
	// so the next run can resume where the last one stopped.
	PreserveProgress StatePolicy = iota
	// ResetProgress clears them: the next run starts from nothing.
	ResetProgress
)

// String is the policy as the REQUEUED event records it:
// "preserve_progress_and_checkpoint" or "reset_progress_and_checkpoint".
func (p StatePolicy) String() string {
	switch p {
	case PreserveProgress:
		return "preserve_progress_and_checkpoint"
	case ResetProgress:
		return "reset_progress_and_checkpoint"
	}
	return "unknown"
}

func (p StatePolicy) validate() error {
	if p != PreserveProgress && p != ResetProgress {
		return errPolicyInvalid.Newf("job requeue state policy %d is unknown", int(p))
	}
	return nil
}

// Request asks to requeue one job: put it back to PENDING in place (same
// id, next run) if it is still as the caller observed it.
type Request struct {
	// Scope is the caller's tenant; the job must belong to exactly this
	// scope or the outcome is NotFound.
	Scope runledger.Scope
	// JobID is the job to requeue.
	JobID uuid.UUID
	// ExpectedStatus and ExpectedRunNumber are what the caller observed:
	// the job is requeued only while it is in that status at that run. The
	// run is not validated: zero or a negative run simply never matches.
	ExpectedStatus    Status
	ExpectedRunNumber int32
	// StatePolicy keeps (the default) or clears progress and checkpoint.
	StatePolicy StatePolicy
	// Reason is recorded as the job's status_reason and in its REQUEUED
	// event. A retry of the same request repeats it exactly: the same job,
	// status and run with another reason, once requeued, is an expectation
	// mismatch.
	Reason string
	// Operator, when not "", names who asked for the requeue; it is
	// recorded in the REQUEUED event as "operator". "" records nothing.
	Operator string
}

// FromJob is the request to requeue job as the caller observed it: its
// scope, id, status and run, with policy and reason. A job that is not
// DEAD_LETTERED or CANCELED gets job.requeue_status_invalid.
func FromJob(job runledger.Job, policy StatePolicy, reason string) (Request, error) {
	st := Status(job.Status)
	if err := st.validate(); err != nil {
		return Request{}, err
	}
	return Request{Scope: job.Scope(), JobID: job.ID, ExpectedStatus: st, ExpectedRunNumber: job.RunNumber,
		StatePolicy: policy, Reason: reason}, nil
}

// Validate checks the request without touching the database, in this
// order, returning the first failure as a Validation error: the scope
// (Organization(uuid.Nil) is job.organization_invalid), the expected
// status (job.requeue_status_invalid), the state policy
// (job.requeue_state_policy_invalid), then the reason: blank after
// trimming Unicode white space (job.requeue_reason_blank), holding a NUL
// byte or invalid UTF-8 (job.requeue_reason_invalid), over MaxReasonBytes
// (job.requeue_reason_too_long), then the operator when set
// (job.operator_invalid). Nothing is trimmed or changed.
func (r Request) Validate() error {
	if err := validate.Scope(r.Scope); err != nil {
		return err
	}
	if err := r.ExpectedStatus.validate(); err != nil {
		return err
	}
	if err := r.StatePolicy.validate(); err != nil {
		return err
	}
	if err := validateReason(r.Reason); err != nil {
		return err
	}
	_, err := validate.Operator(r.Operator)
	return err
}

// validateReason checks a reason as Validate does.
func validateReason(reason string) error {
	switch validate.Text(reason, MaxReasonBytes) {
	case validate.Blank:
		return errReasonBlank.New("job requeue reason was blank")
	case validate.Unclean:
		return errReasonInvalid.New("job requeue reason held a NUL byte or invalid UTF-8")
	case validate.TooLong:
		return errReasonTooLong.Newf("job requeue reason must be at most %d bytes, got %d", MaxReasonBytes, len(reason))
	}
	return nil
}
