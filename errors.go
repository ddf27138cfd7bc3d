package runledger

import (
	"errors"
	"fmt"
)

// Category groups error codes by what a caller can do about them.
type Category string

// The error categories.
const (
	// CategoryValidation: the request is invalid; retrying it unchanged
	// fails again.
	CategoryValidation Category = "validation"
	// CategoryConflict: the request contradicts state that exists (a key
	// reused with different content, a lease that is not held).
	CategoryConflict Category = "conflict"
	// CategoryNotFound: the job does not exist in the caller's scope.
	CategoryNotFound Category = "not_found"
	// CategoryForbidden: the database refused the operation's privileges.
	CategoryForbidden Category = "forbidden"
	// CategoryTransient: the database could not finish this time
	// (serialization failure, deadlock, lock or statement timeout,
	// shutdown, lost connection); the same request may succeed if retried.
	CategoryTransient Category = "transient"
	// CategoryInternal: a bug, a broken invariant or an unclassified
	// database failure.
	CategoryInternal Category = "internal"
)

// Error codes. They are stable: callers and scripts may match on them.
const (
	// Replay request validation (Validation).
	CodeReplayRequestKeyBlank   = "job.replay_request_key_blank"
	CodeReplayRequestKeyTooLong = "job.replay_request_key_too_long"
	CodeReplayRequestKeyInvalid = "job.replay_request_key_invalid"
	CodeReplayReasonBlank       = "job.replay_reason_blank"
	CodeReplayReasonTooLong     = "job.replay_reason_too_long"
	CodeReplayReasonInvalid     = "job.replay_reason_invalid"
	// A caller transaction with an isolation level other than READ
	// COMMITTED (Validation).
	CodeCompareAndReplayUnsupportedIsolation = "job.compare_and_replay_unsupported_isolation"
	// A replay key reused with another reason (Conflict).
	CodeReplayIdempotencyConflict = "job.replay_idempotency_conflict"
	// Lineage whose replay job could not be loaded (Internal).
	CodeReplayIdempotencyConflictMissingExisting = "job.replay_idempotency_conflict_missing_existing"
	// The source kept changing under the lock loop (Internal).
	CodeReplaySourceUnstable = "job.replay_source_unstable"
	// A workflow-managed job cannot be replayed or requeued directly
	// (Validation).
	CodeWorkflowRequeueNotSupported = "job.workflow_requeue_not_supported"
	// The job type is missing or disabled (Validation).
	CodeDefinitionNotFoundOrDisabled = "job.definition_not_found_or_disabled"
	// An execution resource key that is blank or over 512 bytes
	// (Validation).
	CodeInvalidExecutionResourceKey = "job.invalid_execution_resource_key"
	// A persisted value this code cannot decode (Internal).
	CodeInvalidStatus    = "job.invalid_status"
	CodeInvalidStage     = "job.invalid_stage"
	CodeInvalidJobType   = "job.invalid_job_type"
	CodeInvalidEventType = "job.invalid_event_type"
	// A broken invariant of this package (Internal).
	CodeInvariantViolated = "job.invariant_violated"

	// Ledger operations.
	CodeJobNotFound                 = "job.not_found"                             // NotFound
	CodeLeaseMismatch               = "job.lease_mismatch"                        // Conflict
	CodeNotCancelable               = "job.not_cancelable"                        // Conflict
	CodeIdempotencyConflict         = "job.idempotency_conflict"                  // Conflict
	CodeIdempotencyMissingExisting  = "job.idempotency_conflict_missing_existing" // Internal
	CodeEnqueueUnsupportedIsolation = "job.enqueue_unsupported_isolation"         // Validation
	CodeInvalidRequest              = "job.invalid_request"                       // Validation
	CodeAlreadyEnqueued             = "job.already_enqueued"                      // Conflict
	CodeDefinitionNotFound          = "job.definition_not_found"                  // Validation
	CodeOrganizationNotFound        = "job.organization_not_found"                // Validation

	// Database failures by SQLSTATE class.
	CodeUniqueViolation           = "db.unique_violation"                  // Conflict
	CodeRelatedResourceMissing    = "db.related_resource_missing"          // Validation
	CodeRelatedResourceReferenced = "db.related_resource_still_referenced" // Validation
	CodeBusinessRuleViolation     = "db.business_rule_violation"           // Validation
	CodeRequiredFieldMissing      = "db.required_field_missing"            // Validation
	CodePermissionDenied          = "db.permission_denied"                 // Forbidden
	CodeTransient                 = "db.transient"                         // Transient
	CodeQueryFailed               = "db.query_failed"                      // Internal
	CodeCommitUnconfirmed         = "db.transaction_commit_unconfirmed"    // Internal
)

// Error is the error type of every runledger package.
//
// Code and Category are stable and safe to branch on. Message is written for
// the end client and never holds database text; Detail is for logs and
// names the operation and the underlying failure. SQLState and Constraint
// are set when PostgreSQL reported the failure. Err is the cause, if any,
// reachable through errors.Unwrap (a context error, a pgconn error, ...).
//
// Error() prints only the client message and the code. errors.Is(err, S)
// holds for a sentinel S of this package when the codes match.
type Error struct {
	Code       string
	Category   Category
	Message    string
	Detail     string
	SQLState   string
	Constraint string
	Err        error
}

// Error returns "<message> (<code>)".
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code; it makes the
// sentinels below match errors built elsewhere.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t != nil && t.Code == e.Code
}

// Sentinels for errors.Is. They carry the code, category and client message
// of the errors they match; do not modify them.
var (
	ErrReplayIdempotencyConflict = &Error{Code: CodeReplayIdempotencyConflict, Category: CategoryConflict,
		Message: "Job replay request conflicts with the existing replay key."}
	ErrReplayUnsupportedIsolation = &Error{Code: CodeCompareAndReplayUnsupportedIsolation, Category: CategoryValidation,
		Message: "Successful job replay requires READ COMMITTED transaction isolation."}
	ErrWorkflowManaged = &Error{Code: CodeWorkflowRequeueNotSupported, Category: CategoryValidation,
		Message: "Workflow-managed jobs cannot be requeued directly."}
	ErrDefinitionNotFoundOrDisabled = &Error{Code: CodeDefinitionNotFoundOrDisabled, Category: CategoryValidation,
		Message: "Job type is not available."}
	ErrReplaySourceUnstable = &Error{Code: CodeReplaySourceUnstable, Category: CategoryInternal,
		Message: "Job replay source kept changing; try again."}
	ErrCommitUnconfirmed = &Error{Code: CodeCommitUnconfirmed, Category: CategoryInternal,
		Message: "Database transaction commit was not confirmed."}
	ErrJobNotFound = &Error{Code: CodeJobNotFound, Category: CategoryNotFound,
		Message: "Job not found."}
	ErrLeaseMismatch = &Error{Code: CodeLeaseMismatch, Category: CategoryConflict,
		Message: "Job is not leased to this worker at this run and attempt."}
	ErrNotCancelable = &Error{Code: CodeNotCancelable, Category: CategoryConflict,
		Message: "Job has already finished and cannot be canceled."}
	ErrIdempotencyConflict = &Error{Code: CodeIdempotencyConflict, Category: CategoryConflict,
		Message: "Job enqueue request conflicts with the existing idempotency key."}
	ErrEnqueueUnsupportedIsolation = &Error{Code: CodeEnqueueUnsupportedIsolation, Category: CategoryValidation,
		Message: "Keyed job enqueue requires READ COMMITTED transaction isolation."}
	ErrTransient = &Error{Code: CodeTransient, Category: CategoryTransient,
		Message: "Database operation could not complete; retry."}
)

// New returns an error with the code, category and client message of the
// sentinel base, and detail as its internal message.
func New(base *Error, detail string) *Error {
	return &Error{Code: base.Code, Category: base.Category, Message: base.Message, Detail: detail}
}

// Validation returns a Validation error with the given code, client message
// and internal detail.
func Validation(code, message, detail string) *Error {
	return &Error{Code: code, Category: CategoryValidation, Message: message, Detail: detail}
}

// Internal returns an Internal error with the given code, client message and
// internal detail.
func Internal(code, message, detail string) *Error {
	return &Error{Code: code, Category: CategoryInternal, Message: message, Detail: detail}
}

// InvariantViolated returns the Internal error for a broken invariant, one
// the code checks rather than assumes; detail says which.
func InvariantViolated(detail string) *Error {
	return Internal(CodeInvariantViolated, "Job ledger invariant violated.", detail)
}

// CategoryOf returns the category of the first *Error in err's chain, or
// CategoryInternal when there is none (and "" for a nil err).
func CategoryOf(err error) Category {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Category
	}
	return CategoryInternal
}

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsTransient reports whether err is worth retrying unchanged: a transient
// database failure. A commit that was not confirmed is not transient by
// this test; retry it only if the operation is idempotent (replay is).
func IsTransient(err error) bool { return CategoryOf(err) == CategoryTransient }

func newInvalidPersisted(code, message, what, value string) *Error {
	return Internal(code, message, fmt.Sprintf("decode %s: unknown value %q", what, value))
}
