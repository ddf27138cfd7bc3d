// Package dberr translates errors from pgx into *runledger.Error. It is the
// one place that reads SQLSTATEs and constraint names. Message text is read
// for one thing only: Citus passes a worker's integrity error on without
// its constraint field, and the name is then recovered from the quoted,
// shard-suffixed name in the message (Constraint).
package dberr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// Codes of database failures that callers rarely branch on; the category
// says what to do. They are stable like every code.
const (
	codeDefinitionNotFound        runledger.Code = "job.definition_not_found"
	codeRelatedResourceMissing    runledger.Code = "db.related_resource_missing"
	codeRelatedResourceReferenced runledger.Code = "db.related_resource_still_referenced"
	codeBusinessRuleViolation     runledger.Code = "db.business_rule_violation"
	codeRequiredFieldMissing      runledger.Code = "db.required_field_missing"
	codePermissionDenied          runledger.Code = "db.permission_denied"
	codeInvalidValue              runledger.Code = "db.invalid_value"
)

// invalidValue is a data exception (SQLSTATE class 22): a value the
// database cannot store or compute with (a number beyond numeric's range,
// text it cannot encode, a date out of range). Statements bind the
// caller's values, so the value came from the request: it is bad input,
// never a failure of the database.
var invalidValue = errs.Validation(codeInvalidValue, "A value of the request is not valid for the database.")

// constraintErrors classify violations of known constraints before the
// generic SQLSTATE rules. None of job_replays' constraints are listed: the
// protocol makes them unreachable, so a violation is reported generically.
var constraintErrors = map[string]errs.Kind{
	"uq_job_queue_type_idempotency_org":    alreadyEnqueued,
	"uq_job_queue_type_idempotency_global": alreadyEnqueued,
	"fk_job_queue_job_type":                errs.Validation(codeDefinitionNotFound, "Job type is not defined."),
	"fk_job_queue_organization":            errs.Validation(runledger.CodeOrganizationNotFound, "Organization does not exist."),
}

var alreadyEnqueued = errs.Kind{Code: runledger.CodeAlreadyEnqueued, Category: runledger.CategoryConflict,
	Message: "Job is already enqueued."}

// sqlstateErrors classify integrity and privilege failures by SQLSTATE.
var sqlstateErrors = map[string]errs.Kind{
	"23505": {Code: runledger.CodeUniqueViolation, Category: runledger.CategoryConflict, Message: "Resource already exists."},
	"23503": errs.Validation(codeRelatedResourceMissing, "Related resource does not exist."),
	"23001": errs.Validation(codeRelatedResourceReferenced, "Related resource is still referenced."),
	"23514": errs.Validation(codeBusinessRuleViolation, "Request violates a business rule."),
	"23502": errs.Validation(codeRequiredFieldMissing, "Required field is missing."),
	"42501": {Code: codePermissionDenied, Category: runledger.CategoryForbidden, Message: "Permission denied."},
}

// Transient SQLSTATEs: the same request may succeed when retried. The
// whole class 08 (connection exception) is transient as well.
var transientStates = map[string]bool{
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"55P03": true, // lock_not_available (lock_timeout, NOWAIT)
	"57014": true, // query_canceled (statement_timeout, cancel request)
	"57P01": true, // admin_shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now
	"57P05": true, // idle_session_timeout (FATAL, the session ended)
	"25P03": true, // idle_in_transaction_session_timeout (FATAL)
	"53300": true, // too_many_connections
}

// Translate returns err as a *runledger.Error whose Detail is
// "<op>: <cause>". nil stays nil and an *runledger.Error passes through
// unchanged.
//
// An answer from the server (a *pgconn.PgError) is classified by its
// SQLSTATE and constraint, even when ctx has expired since it arrived. A
// failure that is not a server answer while ctx is done, a context error,
// and a query_canceled (57014) while ctx is done (pgx cancels the
// statement when the context ends, for example during a lock wait) are
// transient and wrap the context's error, so errors.Is(result,
// context.Canceled) holds. A lost or refused connection is transient;
// anything else is db.query_failed.
func Translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var re *runledger.Error
	if errors.As(err, &re) {
		return err
	}
	detail := fmt.Sprintf("%s: %v", op, err)
	var pgErr *pgconn.PgError
	isPg := errors.As(err, &pgErr)
	if !isPg || pgErr.Code == "57014" {
		if ctxErr := contextError(ctx, err); ctxErr != nil {
			cause := joinCause(ctxErr, err)
			out := errs.Interrupted.Newf("%s: %v", op, cause)
			out.Err = cause
			if isPg {
				out.SQLState = pgErr.Code
			}
			return out
		}
	}
	var out *runledger.Error
	switch {
	case isPg:
		out = classifyPg(pgErr).New(detail)
		out.SQLState = pgErr.Code
		out.Constraint = Constraint(pgErr)
		if out.Category == runledger.CategoryValidation {
			out.Message = nameField(out.Message, pgErr)
		}
	case isConnectionFailure(err):
		out = errs.Transient.New(detail)
	default:
		out = errs.QueryFailed.New(detail)
	}
	out.Err = err
	return out
}

// CommitUnconfirmed wraps a failed COMMIT, or a write whose reply was
// lost: it may or may not have committed. It matches
// runledger.ErrCommitUnconfirmed and keeps the cause (and its SQLSTATE)
// for logs; when ctx has ended, the cause wraps ctx's error too, so that
// errors.Is(err, context.DeadlineExceeded) holds.
func CommitUnconfirmed(ctx context.Context, op string, err error) error {
	cause := err
	if ctxErr := contextError(ctx, err); ctxErr != nil {
		cause = joinCause(ctxErr, err)
	}
	out := errs.CommitUnconfirmed.New(fmt.Sprintf("%s: %v", op, cause))
	out.Err = cause
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		out.SQLState = pgErr.Code
		out.Constraint = Constraint(pgErr)
	}
	return out
}

// Constraint returns the constraint an integrity error (class 23) names:
// its constraint field or, when that is empty (an error Citus passes on
// from a worker keeps only SQLSTATE and text), the name the message quotes
// after "constraint ", without the shard id Citus appends to the names of
// indexes and foreign keys ("uq_job_replays_source_request_102021"; a
// check constraint keeps its name). "" when there is none (a trigger's
// RAISE, through Citus).
func Constraint(pgErr *pgconn.PgError) string {
	if pgErr.ConstraintName != "" || !strings.HasPrefix(pgErr.Code, "23") {
		return pgErr.ConstraintName
	}
	_, rest, ok := strings.Cut(pgErr.Message, `constraint "`)
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, `"`)
	if !ok {
		return ""
	}
	// A shard id is a number of at least six digits (Citus starts them at
	// 102008); no constraint of the schema ends in one.
	if cut := strings.LastIndexByte(name, '_'); cut > 0 && len(name)-cut-1 >= 6 && strings.Trim(name[cut+1:], "0123456789") == "" {
		name = name[:cut]
	}
	return name
}

// classifyPg returns the kind of a server error: a known constraint's
// first, then transient states, then the SQLSTATE table.
func classifyPg(pgErr *pgconn.PgError) errs.Kind {
	if k, ok := constraintErrors[Constraint(pgErr)]; ok && strings.HasPrefix(pgErr.Code, "23") {
		return k
	}
	if transientStates[pgErr.Code] || strings.HasPrefix(pgErr.Code, "08") {
		return errs.Transient
	}
	if k, ok := sqlstateErrors[pgErr.Code]; ok {
		return k
	}
	if strings.HasPrefix(pgErr.Code, "22") {
		return invalidValue
	}
	return errs.QueryFailed
}

// Field returns the field a refused value belongs to: the column the
// server names, else the one a check constraint is named after
// (chk_job_queue_max_attempts_positive: max_attempts), else "".
func Field(pgErr *pgconn.PgError) string {
	if pgErr.ColumnName != "" {
		return pgErr.ColumnName
	}
	name := Constraint(pgErr)
	if !strings.HasPrefix(name, "chk_") || pgErr.Code != "23514" {
		return ""
	}
	name = strings.TrimPrefix(name, "chk_")
	table := strings.TrimSuffix(pgErr.TableName, "_"+lastPart(pgErr.TableName)) // a Citus shard suffix
	for _, t := range []string{pgErr.TableName, table} {
		if t != "" && strings.HasPrefix(name, t+"_") {
			name = strings.TrimPrefix(name, t+"_")
			break
		}
	}
	for _, suffix := range []string{"_positive", "_nonnegative", "_not_blank"} {
		name = strings.TrimSuffix(name, suffix)
	}
	return name
}

func lastPart(s string) string {
	if i := strings.LastIndexByte(s, '_'); i >= 0 {
		return s[i+1:]
	}
	return ""
}

// nameField adds to a validation message the field the server's refusal
// names, and the server's own words for a data exception.
func nameField(message string, pgErr *pgconn.PgError) string {
	if f := Field(pgErr); f != "" {
		message = strings.TrimSuffix(message, ".") + " (field " + f + ")."
	}
	if strings.HasPrefix(pgErr.Code, "22") && pgErr.Message != "" {
		message = strings.TrimSuffix(message, ".") + ": " + pgErr.Message + "."
	}
	return message
}

// contextError returns the context error behind err, if the operation ended
// because its context was done.
func contextError(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	if ctx != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// isConnectionFailure reports a connection that failed or was lost: a
// failed connect, an operation refused before anything was sent, a network
// error or an unexpected end of the stream.
func isConnectionFailure(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), pgconn.SafeToRetry(err), pgconn.Timeout(err), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}

func joinCause(ctxErr, err error) error {
	if errors.Is(err, ctxErr) {
		return err
	}
	return fmt.Errorf("%w: %w", ctxErr, err)
}
