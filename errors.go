package runledger

import (
	"errors"
	"log/slog"
	"strings"
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

// Code is the stable identifier of an error, such as "job.not_found".
// Codes never change once published; callers and scripts may match on them.
//
// A Code is itself an error, so errors.Is(err, CodeJobNotFound) holds when
// err's chain holds an *Error with that code. Codes this package does not
// name (per-field validation codes such as "job.payload_invalid") match
// the same way: errors.Is(err, Code("job.payload_invalid")).
type Code string

// Error returns the code itself.
func (c Code) Error() string { return string(c) }

// The codes a caller is expected to branch on. Every other code is listed,
// with its category, in docs/ERRORS.md.
const (
	// CodeJobNotFound (NotFound): no job with the id in the caller's scope.
	CodeJobNotFound Code = "job.not_found"
	// CodeDefinitionMissing (NotFound): a definition read found no
	// definition for the job type.
	CodeDefinitionMissing Code = "job.definition_missing"
	// CodeDefinitionNotFoundOrDisabled (Validation): an enqueue or a
	// replay names a job type whose definition is missing or disabled;
	// nothing is written.
	CodeDefinitionNotFoundOrDisabled Code = "job.definition_not_found_or_disabled"
	// CodeOrganizationNotFound (Validation): the job's organization does
	// not exist.
	CodeOrganizationNotFound Code = "job.organization_not_found"
	// CodeOrganizationInvalid (Validation): a scope or job names the nil
	// UUID as its organization (Organization(uuid.Nil)); the nil UUID is
	// how the global scope is stored, so it is no organization's id.
	// Nothing is read or written.
	CodeOrganizationInvalid Code = "job.organization_invalid"

	// CodeIdempotencyConflict (Conflict): an idempotency key reused with
	// another request.
	CodeIdempotencyConflict Code = "job.idempotency_conflict"
	// CodeReplayIdempotencyConflict (Conflict): a replay key reused with
	// another reason.
	CodeReplayIdempotencyConflict Code = "job.replay_idempotency_conflict"
	// CodeAlreadyEnqueued (Conflict): the keyed job exists (the unique
	// index refused a concurrent insert).
	CodeAlreadyEnqueued Code = "job.already_enqueued"
	// CodeLeaseMismatch (Conflict): the job is not leased to this worker
	// at this run and attempt.
	CodeLeaseMismatch Code = "job.lease_mismatch"
	// CodeNotCancelable (Conflict): the job has already finished.
	CodeNotCancelable Code = "job.not_cancelable"
	// CodeUniqueViolation (Conflict): another unique constraint refused
	// the write.
	CodeUniqueViolation Code = "db.unique_violation"

	// CodeReplayUnsupportedIsolation (Validation): the caller's
	// transaction for a replay is not READ COMMITTED, or is read-only. A
	// read-only transaction has then been aborted by the server's refusal
	// of the replay's first locking read (the detail says so): roll it
	// back. Under another isolation level it is left usable.
	CodeReplayUnsupportedIsolation Code = "job.compare_and_replay_unsupported_isolation"
	// CodeEnqueueUnsupportedIsolation (Validation): the caller's
	// transaction for a keyed enqueue is not READ COMMITTED.
	CodeEnqueueUnsupportedIsolation Code = "job.enqueue_unsupported_isolation"
	// CodeWorkflowManaged (Validation): a workflow-managed job cannot be
	// replayed or requeued directly.
	CodeWorkflowManaged Code = "job.workflow_requeue_not_supported"

	// CodeTransient (Transient): retry the same request.
	CodeTransient Code = "db.transient"
	// CodeQueryFailed (Internal): an unclassified database failure.
	CodeQueryFailed Code = "db.query_failed"
	// CodeInvariantViolated (Internal): a broken invariant this code
	// checks rather than assumes.
	CodeInvariantViolated Code = "job.invariant_violated"
	// CodeReplaySourceUnstable (Internal): the replay source kept changing
	// under the bounded lock loop; a retry usually succeeds.
	CodeReplaySourceUnstable Code = "job.replay_source_unstable"
)

// ErrCommitUnconfirmed (code db.transaction_commit_unconfirmed, Internal)
// is the code of a failed COMMIT: the transaction may or may not have
// committed. Match it with errors.Is(err, ErrCommitUnconfirmed). Repeating
// an idempotent operation (a replay, a keyed enqueue) with the same input
// is the recovery.
const ErrCommitUnconfirmed Code = "db.transaction_commit_unconfirmed"

// Error is the error type of every runledger package.
//
// Code and Category are stable and safe to branch on. Message is written for
// the end client and never holds database text; Detail is for logs and
// names the operation and the underlying failure. SQLState and Constraint
// are set when PostgreSQL reported the failure. Err is the cause, if any,
// reachable through errors.Unwrap (a context error, a pgconn error, ...).
type Error struct {
	Code       Code
	Category   Category
	Message    string
	Detail     string
	SQLState   string
	Constraint string
	Err        error
}

// Error returns "<message> (<code>): <detail>: <cause>", leaving out an
// empty detail and a cause whose text the detail already holds, so that
// %v in a log line keeps everything.
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	b.WriteString(e.Message)
	b.WriteString(" (")
	b.WriteString(string(e.Code))
	b.WriteString(")")
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		if cause := e.Err.Error(); !strings.Contains(e.Detail, cause) {
			b.WriteString(": ")
			b.WriteString(cause)
		}
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's Code, so that errors.Is(err, code)
// holds for any error whose chain holds an *Error with that code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && e != nil && c == e.Code
}

// LogValue returns e as a group of its non-empty fields (code, category,
// message, detail, sqlstate, constraint, cause) for log/slog.
func (e *Error) LogValue() slog.Value {
	if e == nil {
		return slog.StringValue("<nil>")
	}
	attrs := []slog.Attr{slog.String("code", string(e.Code)), slog.String("category", string(e.Category)),
		slog.String("message", e.Message)}
	for _, a := range []struct{ key, val string }{
		{"detail", e.Detail}, {"sqlstate", e.SQLState}, {"constraint", e.Constraint},
	} {
		if a.val != "" {
			attrs = append(attrs, slog.String(a.key, a.val))
		}
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("cause", e.Err.Error()))
	}
	return slog.GroupValue(attrs...)
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
func CodeOf(err error) Code {
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
