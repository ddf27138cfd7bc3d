package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

// CancelRequest asks to cancel a job that has not finished.
type CancelRequest struct {
	// Scope is the caller's tenant; a job in another scope is NotFound.
	Scope runledger.Scope
	JobID uuid.UUID
	// Reason is stored as status_reason and in the CANCELED event; a blank
	// reason stores NULL.
	Reason string
	// Operator, when not "", names who canceled; it is recorded in the
	// CANCELED event as "operator". "" records nothing.
	Operator string
}

// Validate checks the scope (job.organization_invalid) and the reason
// (job.cancel_reason_invalid: NUL or invalid UTF-8), then the operator
// when set (job.operator_invalid), without touching the database.
func (r CancelRequest) Validate() error {
	if err := validate.Scope(r.Scope); err != nil {
		return err
	}
	if !validate.Clean(r.Reason) {
		return validate.Invalid(errCancelReasonInvalid, "cancel reason holds a NUL byte or invalid UTF-8")
	}
	_, err := validate.Operator(r.Operator)
	return err
}

// maxCancelAttempts bounds the cancel loop; see cancel.
const maxCancelAttempts = 3

// Cancel cancels a PENDING or LEASED job in the caller's scope in one
// statement on the pool (on Citus, the cancel and then its event in one
// transaction of two round trips), writes one CANCELED event and returns the job
// (CANCELED, finished). A job not in scope (or missing) is
// runledger.CodeJobNotFound; a job already SUCCEEDED, DEAD_LETTERED or
// CANCELED is runledger.CodeNotCancelable; nothing is written in either
// case. Canceling a leased job does not stop its worker, whose lease.Complete or
// lease.Fail then gets runledger.CodeLeaseMismatch; the job keeps its execution
// resource claim until the canceled lease would have expired, so no other
// job with the key runs beside a worker that has not noticed. A lost reply
// is runledger.ErrCommitUnconfirmed, as for lease.Complete: the job may be
// canceled; a retry then answers runledger.CodeNotCancelable.
func Cancel(ctx context.Context, pool *pgxpool.Pool, req CancelRequest) (runledger.Job, error) {
	return txn.OwnedWrite(ctx, pool, "job cancel", req, cancel)
}

// CancelTx is Cancel inside the caller's transaction, which it never
// commits or rolls back; the job stays locked until it ends.
func CancelTx(ctx context.Context, tx pgx.Tx, req CancelRequest) (runledger.Job, error) {
	return txn.JoinedWrite(ctx, tx, "job cancel", req, cancel)
}

// cancel runs the compare-and-set cancel; when it matches nothing, an
// unlocked read in scope tells NotFound from not cancelable. Should that
// read find the job cancelable after all (it changed between the two
// statements), the cancel is tried again, a bounded number of times.
func cancel(ctx context.Context, s *txn.Session, req CancelRequest) (runledger.Job, error) {
	var reason *string
	if strings.TrimSpace(req.Reason) != "" {
		r := req.Reason
		reason = &r
	}
	org := rows.Tenant(req.Scope)
	dist, err := s.Distributed(ctx)
	if err != nil {
		return runledger.Job{}, err
	}
	for attempt := 1; attempt <= maxCancelAttempts; attempt++ {
		var row db.JobCancelRow
		if dist {
			row, err = cancelRouted(ctx, s, reason, req, org)
		} else {
			row, err = txn.One(ctx, s, "cancel job", func(q db.DBTX) (db.JobCancelRow, error) {
				return queries.JobCancel(ctx, q, db.JobCancelParams{Reason: reason, Operator: validate.OperatorArg(req.Operator), ID: req.JobID, OrganizationID: org})
			})
		}
		if err == nil {
			return rows.Job(db.JobQueue(row))
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return runledger.Job{}, err
		}
		actual, err := queries.JobGetByID(ctx, s.DB(), db.JobGetByIDParams{ID: req.JobID, OrganizationID: org})
		if errors.Is(err, pgx.ErrNoRows) {
			return runledger.Job{}, errs.JobNotFound.New(
				fmt.Sprintf("cancel job: job %s not found in scope %s", req.JobID, req.Scope))
		}
		if err != nil {
			return runledger.Job{}, dberr.Translate(ctx, "read job after cancel miss", err)
		}
		switch actual.Status {
		case db.JobStatusSUCCEEDED, db.JobStatusDEADLETTERED, db.JobStatusCANCELED:
			return runledger.Job{}, errs.NotCancelable.New(
				fmt.Sprintf("cancel job: job %s is already %s", req.JobID, actual.Status))
		}
	}
	return runledger.Job{}, errs.Invariantf(
		"cancel job %s: the job stayed cancelable to the read but not to the update after %d attempts", req.JobID, maxCancelAttempts)
}

// cancelRouted is JobCancel on Citus, where the cancel and its event are
// two statements, each run in one step on the tenant's shard: [BEGIN,] the
// cancel (JobCancelRouted); then, when it canceled the job, its event
// (JobEventCanceled, from the row it returned)[, COMMIT]. The job stays
// locked by the cancel until the transaction ends. pgx.ErrNoRows when
// nothing was canceled (the transaction stays open, nothing written).
func cancelRouted(ctx context.Context, s *txn.Session, reason *string, req CancelRequest, org uuid.UUID) (db.JobCancelRow, error) {
	b := s.Batch(ctx)
	st := txn.Queue(b, "cancel job", func(q db.DBTX) (db.JobQueue, error) {
		return queries.JobCancelRouted(ctx, q, db.JobCancelRoutedParams{Reason: reason, ID: req.JobID, OrganizationID: org})
	})
	if err := b.Send(ctx); err != nil {
		return db.JobCancelRow{}, err
	}
	if st.Err != nil {
		return db.JobCancelRow{}, st.Err
	}
	row := st.Val
	b = s.Batch(ctx)
	txn.Queue(b, "record the canceled event", func(q db.DBTX) (struct{}, error) {
		return struct{}{}, queries.JobEventCanceled(ctx, q, db.JobEventCanceledParams{
			OrganizationID: org, JobID: row.ID, RunNumber: row.RunNumber, Attempt: row.Attempt,
			Stage: row.Stage, Reason: row.StatusReason, Operator: validate.OperatorArg(req.Operator),
		})
	})
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return db.JobCancelRow{}, err
	}
	return db.JobCancelRow(row), nil
}
