// Package dberr translates errors from pgx into *runledger.Error. It is the
// one place that reads SQLSTATEs and constraint names; nothing matches on
// message text.
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
)

// constraintErrors classify violations of known constraints before the
// generic SQLSTATE rules. None of job_replays' constraints are listed: the
// protocol makes them unreachable, so a violation is reported generically.
var constraintErrors = map[string]struct {
	code     string
	category runledger.Category
	message  string
}{
	"uq_job_queue_type_idempotency_org":    {runledger.CodeAlreadyEnqueued, runledger.CategoryConflict, "Job is already enqueued."},
	"uq_job_queue_type_idempotency_global": {runledger.CodeAlreadyEnqueued, runledger.CategoryConflict, "Job is already enqueued."},
	"fk_job_queue_job_type":                {runledger.CodeDefinitionNotFound, runledger.CategoryValidation, "Job type is not defined."},
	"fk_job_queue_organization":            {runledger.CodeOrganizationNotFound, runledger.CategoryValidation, "Organization does not exist."},
}

// Transient SQLSTATEs: the same request may succeed when retried.
var transientStates = map[string]bool{
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
	"55P03": true, // lock_not_available (lock_timeout, NOWAIT)
	"57014": true, // query_canceled (statement_timeout)
	"57P01": true, // admin_shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now
	"53300": true, // too_many_connections
}

// Translate returns err as a *runledger.Error whose Detail is
// "<op>: <cause>". nil stays nil and an *runledger.Error passes through
// unchanged. When ctx is done, or err is a context error, the result is
// transient and wraps the context's error, so errors.Is(result,
// context.Canceled) holds.
func Translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var re *runledger.Error
	if errors.As(err, &re) {
		return err
	}
	if ctxErr := contextError(ctx, err); ctxErr != nil {
		return &runledger.Error{
			Code: runledger.CodeTransient, Category: runledger.CategoryTransient,
			Message: "Database operation was interrupted; retry.",
			Detail:  fmt.Sprintf("%s: %v", op, err),
			Err:     joinCause(ctxErr, err),
		}
	}
	out := &runledger.Error{Detail: fmt.Sprintf("%s: %v", op, err), Err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		out.SQLState = pgErr.Code
		out.Constraint = pgErr.ConstraintName
		classifyPg(out, pgErr)
		return out
	}
	if isConnectionFailure(err) {
		setTransient(out)
		return out
	}
	out.Code, out.Category, out.Message = runledger.CodeQueryFailed, runledger.CategoryInternal, "Database operation failed."
	return out
}

// CommitUnconfirmed wraps a failed COMMIT: the transaction may or may not
// have committed. It matches runledger.ErrCommitUnconfirmed and keeps the
// cause (and its SQLSTATE) for logs.
func CommitUnconfirmed(op string, err error) error {
	out := runledger.New(runledger.ErrCommitUnconfirmed, fmt.Sprintf("%s: %v", op, err))
	out.Err = err
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		out.SQLState = pgErr.Code
		out.Constraint = pgErr.ConstraintName
	}
	return out
}

func classifyPg(out *runledger.Error, pgErr *pgconn.PgError) {
	if c, ok := constraintErrors[pgErr.ConstraintName]; ok && strings.HasPrefix(pgErr.Code, "23") {
		out.Code, out.Category, out.Message = c.code, c.category, c.message
		return
	}
	if transientStates[pgErr.Code] || strings.HasPrefix(pgErr.Code, "08") {
		setTransient(out)
		return
	}
	switch pgErr.Code {
	case "23505":
		out.Code, out.Category, out.Message = runledger.CodeUniqueViolation, runledger.CategoryConflict, "Resource already exists."
	case "23503":
		out.Code, out.Category, out.Message = runledger.CodeRelatedResourceMissing, runledger.CategoryValidation, "Related resource does not exist."
	case "23001":
		out.Code, out.Category, out.Message = runledger.CodeRelatedResourceReferenced, runledger.CategoryValidation, "Related resource is still referenced."
	case "23514":
		out.Code, out.Category, out.Message = runledger.CodeBusinessRuleViolation, runledger.CategoryValidation, "Request violates a business rule."
	case "23502":
		out.Code, out.Category, out.Message = runledger.CodeRequiredFieldMissing, runledger.CategoryValidation, "Required field is missing."
	case "42501":
		out.Code, out.Category, out.Message = runledger.CodePermissionDenied, runledger.CategoryForbidden, "Permission denied."
	default:
		out.Code, out.Category, out.Message = runledger.CodeQueryFailed, runledger.CategoryInternal, "Database operation failed."
	}
}

func setTransient(out *runledger.Error) {
	out.Code, out.Category, out.Message = runledger.ErrTransient.Code, runledger.ErrTransient.Category, runledger.ErrTransient.Message
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
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
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
