// Package errs builds the *runledger.Error values the library returns. It
// is the only place, besides the root package's type, that knows how an
// error is put together: a Kind carries a code, its category and the
// client message, and New or Newf adds the internal detail.
//
// It imports only the root package, so every other package (dberr, txn,
// replay, jobs, the command line) can use it.
package errs

import (
	"fmt"

	"github.com/runledger-go/runledger"
)

// Kind is the fixed part of an error: its code, category and client
// message. Kinds are values; New returns a fresh *runledger.Error each time.
type Kind struct {
	Code     runledger.Code
	Category runledger.Category
	Message  string
}

// New returns an error of kind k with detail as its internal message.
func (k Kind) New(detail string) *runledger.Error {
	return &runledger.Error{Code: k.Code, Category: k.Category, Message: k.Message, Detail: detail}
}

// Newf returns an error of kind k with a formatted detail.
func (k Kind) Newf(format string, args ...any) *runledger.Error {
	return k.New(fmt.Sprintf(format, args...))
}

// Validation returns the Kind of a Validation error.
func Validation(code runledger.Code, message string) Kind {
	return Kind{Code: code, Category: runledger.CategoryValidation, Message: message}
}

// Internal returns the Kind of an Internal error.
func Internal(code runledger.Code, message string) Kind {
	return Kind{Code: code, Category: runledger.CategoryInternal, Message: message}
}

// The kinds of the codes the root package names.
var (
	JobNotFound = Kind{runledger.CodeJobNotFound, runledger.CategoryNotFound,
		"Job not found."}
	DefinitionMissing = Kind{runledger.CodeDefinitionMissing, runledger.CategoryNotFound,
		"Job definition not found."}
	DefinitionUnavailable = Validation(runledger.CodeDefinitionNotFoundOrDisabled,
		"Job type is not available.")
	IdempotencyConflict = Kind{runledger.CodeIdempotencyConflict, runledger.CategoryConflict,
		"Job enqueue request conflicts with the existing idempotency key."}
	ReplayIdempotencyConflict = Kind{runledger.CodeReplayIdempotencyConflict, runledger.CategoryConflict,
		"Job replay request conflicts with the existing replay key."}
	LeaseMismatch = Kind{runledger.CodeLeaseMismatch, runledger.CategoryConflict,
		"Job is not leased to this worker at this run and attempt."}
	NotCancelable = Kind{runledger.CodeNotCancelable, runledger.CategoryConflict,
		"Job has already finished and cannot be canceled."}
	ReplayUnsupportedIsolation = Validation(runledger.CodeReplayUnsupportedIsolation,
		"Successful job replay requires READ COMMITTED transaction isolation.")
	EnqueueUnsupportedIsolation = Validation(runledger.CodeEnqueueUnsupportedIsolation,
		"Keyed job enqueue requires READ COMMITTED transaction isolation.")
	WorkflowManaged = Validation(runledger.CodeWorkflowManaged,
		"Workflow-managed jobs cannot be requeued directly.")
	Transient = Kind{runledger.CodeTransient, runledger.CategoryTransient,
		"Database operation could not complete; retry."}
	Interrupted = Kind{runledger.CodeTransient, runledger.CategoryTransient,
		"Database operation was interrupted; retry."}
	QueryFailed       = Internal(runledger.CodeQueryFailed, "Database operation failed.")
	CommitUnconfirmed = Internal(runledger.ErrCommitUnconfirmed,
		"Database transaction commit was not confirmed.")
	ReplaySourceUnstable = Internal(runledger.CodeReplaySourceUnstable,
		"Job replay source kept changing; try again.")
	InvariantViolated = Internal(runledger.CodeInvariantViolated,
		"Job ledger invariant violated.")
)

// Invariant returns the Internal error for a broken invariant, one the
// code checks rather than assumes; detail says which.
func Invariant(detail string) *runledger.Error { return InvariantViolated.New(detail) }

// Invariantf is Invariant with a formatted detail.
func Invariantf(format string, args ...any) *runledger.Error {
	return InvariantViolated.Newf(format, args...)
}

// JobIDFailed is the Internal error of a job id that could not be
// generated (the system's random source failed).
var JobIDFailed = Internal(runledger.CodeInvariantViolated, "Job id could not be generated.")

// DefinitionUnavailableFor returns the error of an enqueue or replay of
// jobType whose definition is missing or disabled; nothing was written.
func DefinitionUnavailableFor(jobType string) *runledger.Error {
	return DefinitionUnavailable.Newf("enqueue job: definition missing or disabled for job type %q", jobType)
}

// ListLimitInvalid refuses a page size of a listing (jobs, replays) outside
// 1 to 1000; jobs and replay share it.
var ListLimitInvalid = Validation("job.list_limit_invalid", "List limit must be between 1 and 1000.")
