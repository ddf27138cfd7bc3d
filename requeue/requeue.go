// Package requeue implements compare-and-requeue: given a job that ended
// DEAD_LETTERED or CANCELED at a run the caller observed, it puts the job
// back to PENDING in place (the same id, the next run, attempt 0, due
// now), keeping or clearing its progress and checkpoint, and records one
// REQUEUED event with the provenance, all in one transaction. It is the
// sibling of package replay, which makes a fresh job from a SUCCEEDED one.
//
// The compare: the job is requeued only while it is in the caller's
// scope, in the observed status at the observed run, in no workflow step
// (job.workflow_requeue_not_supported), and, when CANCELED, once the
// lease of its canceled attempt has run out by the database clock (until
// then its worker may still be running it: NotQuiesced, with the time to
// retry after). A run is requeued at most once: repeating a request (same
// job, status, run and reason) after it committed returns Existing and
// writes nothing, and concurrent identical requests serialize on the job
// row and resolve to one requeue. That needs READ COMMITTED, which both
// entry points enforce.
//
// Locks: a requeue locks the job FOR NO KEY UPDATE (the event's foreign
// key check, KEY SHARE, composes with it) until the transaction ends.
// Existing, ExpectationMismatch, NotQuiesced and NotFound lock nothing
// when found at once; a mismatch found after the locking update waited
// for another transaction that then changed the job keeps the job locked
// until the transaction ends (PostgreSQL locks the row's newest version
// before it re-checks it). Job commits at once, so that lock ends with the
// call; in JobTx it lasts until the caller's transaction ends.
//
// Round trips: every outcome costs one (BEGIN to COMMIT in Job; the SHOW
// probe of the caller's transaction and then one in JobTx): one statement
// locks, requeues and writes the event, or on a miss classifies it from
// its snapshot. More only after an error (ROLLBACK) or when the bounded
// lock loop tries again: when the job changed while the statement waited
// for its lock (a concurrent identical request among them), the next
// attempt's snapshot sees the change and tells the outcome.
//
// Bulk is the same operation for a whole selection of jobs (a list, or a
// filter on status, type, error code, finish time and scope) under one
// reason, in chunks of set-based statements, one transaction each; each
// job gets the verdict Job would give it, and running the same action
// again requeues only what is missing.
package requeue

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/internal/wake"
)

// MaxLockAttempts bounds the lock loop. The loop repeats only when the
// requeue statement's lock found nothing to requeue while its snapshot saw
// the job requeueable as observed (the row changed while the statement
// waited for the lock); the next attempt sees the change, so it converges
// at once in practice. Past the bound the operation fails with
// job.requeue_target_unstable rather than report a mismatch whose actual
// state equals the expectation.
const MaxLockAttempts = 4

const (
	ownedOperation = "compare-and-requeue"
	txOperation    = "job compare-and-requeue"
)

// requeueWakeKey is the wake limiter's key for requeues (see package
// internal/wake).
const requeueWakeKey = "\x00requeue"

// Job requeues a job in a READ COMMITTED transaction of its own (whatever
// the session default), sent with its statements in one round trip (on
// Citus two: the requeue, then its event or the classification of a miss
// with the COMMIT). The request is validated before a connection is taken.
//
// Every outcome commits; only Requeued with disposition Inserted wrote
// anything. A statement error rolls back and is returned;
// job.workflow_requeue_not_supported refuses a job a workflow step owns.
// A failed COMMIT, or a connection lost after the batch was sent, matches
// runledger.ErrCommitUnconfirmed: the requeue may or may not have
// happened; repeat the call with the same request (it then answers
// Existing if it had). If ctx ends while a statement waits for a lock,
// the statement is canceled on the server, the transaction rolls back,
// and the error wraps ctx's error.
func Job(ctx context.Context, pool *pgxpool.Pool, req Request) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s, err := txn.Own(ctx, pool, ownedOperation)
	if err != nil {
		return nil, err
	}
	defer s.End(ctx)
	return run(ctx, s, req)
}

// JobTx requeues a job inside the caller's transaction, which it never
// commits or rolls back.
//
// It validates the request, then refuses any transaction but a read-write
// READ COMMITTED one (job.compare_and_requeue_unsupported_isolation),
// since each statement must see what concurrent requeues committed: it
// asks with SHOW in a round trip of its own, so a refused transaction is
// refused at once, with no snapshot or lock taken and not aborted. Then
// one round trip, as Job's. A requeue's lock on the job lasts until the
// caller's transaction ends (workers skip the job until then). On an
// error the caller should roll back.
//
// When ctx ends while a statement runs, the statement is canceled on the
// server (the caller's transaction is then aborted: roll it back), and
// the error wraps ctx's error.
func JobTx(ctx context.Context, tx pgx.Tx, req Request) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s := txn.Join(tx, txOperation)
	if err := txn.CheckCallerTx(ctx, s, txOperation, errUnsupportedIsolation); err != nil {
		return nil, err
	}
	return run(ctx, s, req)
}

var queries = db.New()

// run is the body shared by both entry points: the bounded lock loop, one
// round trip per attempt.
func run(ctx context.Context, s *txn.Session, req Request) (Outcome, error) {
	for attempt := 1; attempt <= MaxLockAttempts; attempt++ {
		step, err := sendAttempt(ctx, s, req, attempt)
		if err != nil {
			return nil, err
		}
		out, retry, err := decide(req, step)
		if !retry {
			return out, err
		}
		// Requeueable in the statement's snapshot but not to its lock (the
		// row changed while the statement waited for it): try again.
	}
	return nil, errTargetUnstable.Newf("job %s stayed requeueable in each attempt's snapshot but not to its lock after %d attempts",
		req.JobID, MaxLockAttempts)
}

// sendAttempt sends one attempt in one round trip: [BEGIN READ
// COMMITTED,] the requeue statement (which locks, writes and, on a miss,
// classifies), the workers' wake-up[, COMMIT].
func sendAttempt(ctx context.Context, s *txn.Session, req Request, n int) (*txn.Step[db.JobRequeueRow], error) {
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	if dist {
		return sendAttemptRouted(ctx, s, req, n)
	}
	org := rows.Tenant(req.Scope)
	notify := wake.Due(requeueWakeKey)
	b := s.Batch(ctx)
	step := txn.Queue(b, "requeue job", func(q db.DBTX) (db.JobRequeueRow, error) {
		return queries.JobRequeue(ctx, q, db.JobRequeueParams{
			OrganizationID: org, ID: req.JobID, ExpectedStatus: db.JobStatus(req.ExpectedStatus),
			ExpectedRunNumber: req.ExpectedRunNumber, ResetProgress: req.StatePolicy == ResetProgress,
			Reason: req.Reason, StatePolicy: req.StatePolicy.String(), Operator: validate.OperatorArg(req.Operator),
		})
	})
	requeuedRow := func() bool { return step.Row() && step.Val.Requeued }
	call := failpointCall{JobID: req.JobID, Attempt: n}
	b.PointIf(fpAfterLockMiss, call, func() bool { return !requeuedRow() })
	if notify {
		wake.Queue(ctx, b, "")
	}
	b.PointIf(fpAfterRequeue, call, requeuedRow)
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	return step, nil
}

// sendAttemptRouted is sendAttempt on Citus, where JobRequeue runs in
// steps through the coordinator: two round trips, each statement run in
// one step on the tenant's shard. First [BEGIN READ COMMITTED,] the
// requeue (JobRequeueRouted); then, when it requeued the job, its event
// (JobEventRequeued, from the row it returned), or, when it did not, the
// job and the classification of the miss (JobGetByID,
// JobGetForBulkRequeueClassification: a snapshot taken after the
// requeue's); the workers' wake-up[, COMMIT]. It returns the row
// JobRequeue would have.
func sendAttemptRouted(ctx context.Context, s *txn.Session, req Request, n int) (*txn.Step[db.JobRequeueRow], error) {
	org := rows.Tenant(req.Scope)
	notify := wake.Due(requeueWakeKey)
	b := s.Batch(ctx)
	update := txn.Queue(b, "requeue job", func(q db.DBTX) (db.JobRequeueRoutedRow, error) {
		return queries.JobRequeueRouted(ctx, q, db.JobRequeueRoutedParams{
			OrganizationID: org, ID: req.JobID, ExpectedStatus: db.JobStatus(req.ExpectedStatus),
			ExpectedRunNumber: req.ExpectedRunNumber, ResetProgress: req.StatePolicy == ResetProgress, Reason: req.Reason,
		})
	})
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	if update.Err != nil && !errors.Is(update.Err, pgx.ErrNoRows) {
		return nil, update.Err
	}
	call := failpointCall{JobID: req.JobID, Attempt: n}
	b = s.Batch(ctx)
	out := &txn.Step[db.JobRequeueRow]{}
	if update.Row() {
		r := update.Val
		b.Point(fpAfterRequeue, call)
		event := txn.Queue(b, "record the requeued event", func(q db.DBTX) (int64, error) {
			return queries.JobEventRequeued(ctx, q, db.JobEventRequeuedParams{
				OrganizationID: org, JobID: r.ID, RunNumber: r.BeforeRunNumber, Attempt: r.BeforeAttempt,
				Reason: req.Reason, StatePolicy: req.StatePolicy.String(), Operator: validate.OperatorArg(req.Operator),
			})
		})
		if notify {
			wake.Queue(ctx, b, "")
		}
		b.Commit(ctx)
		if err := b.Send(ctx); err != nil {
			return nil, err
		}
		out.Val = db.JobRequeueRow{
			Requeued: true, ID: r.ID, JobType: r.JobType, OrganizationID: r.OrganizationID, Payload: r.Payload,
			Status: r.Status, Priority: r.Priority, RunNumber: r.RunNumber, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
			TimeoutSeconds: r.TimeoutSeconds, NextRunAt: r.NextRunAt, LeaseExpiresAt: r.LeaseExpiresAt,
			LastHeartbeatAt: r.LastHeartbeatAt, WorkerID: r.WorkerID, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
			Stage: r.Stage, ProgressDone: r.ProgressDone, ProgressTotal: r.ProgressTotal, ProgressPct: r.ProgressPct,
			Checkpoint: r.Checkpoint, IdempotencyKey: r.IdempotencyKey, StatusReason: r.StatusReason,
			LastErrorCode: r.LastErrorCode, LastErrorMessage: r.LastErrorMessage, CreatedAt: r.CreatedAt,
			UpdatedAt: r.UpdatedAt, EnqueueRequest: r.EnqueueRequest, Output: r.Output,
			ExecutionResourceKey: r.ExecutionResourceKey,
			BeforeStatus:         r.BeforeStatus, BeforeStage: r.BeforeStage, BeforeRunNumber: r.BeforeRunNumber,
			BeforeAttempt: r.BeforeAttempt, BeforeProgressDone: r.BeforeProgressDone,
			BeforeProgressTotal: r.BeforeProgressTotal, BeforeProgressPct: r.BeforeProgressPct,
			BeforeCheckpoint: r.BeforeCheckpoint, BeforeOutput: r.BeforeOutput,
			BeforeLeaseExpiresAt: r.BeforeLeaseExpiresAt, BeforeLastHeartbeatAt: r.BeforeLastHeartbeatAt,
			BeforeWorkerID: r.BeforeWorkerID, BeforeStartedAt: r.BeforeStartedAt, BeforeFinishedAt: r.BeforeFinishedAt,
			BeforeNextRunAt: r.BeforeNextRunAt, BeforeStatusReason: r.BeforeStatusReason,
			BeforeLastErrorCode: r.BeforeLastErrorCode, BeforeLastErrorMessage: r.BeforeLastErrorMessage,
			BeforeUpdatedAt: r.BeforeUpdatedAt, EventID: event.Val, EventCount: 1,
		}
		return out, nil
	}
	b.Point(fpAfterLockMiss, call)
	job := txn.Queue(b, "read job after requeue miss", func(q db.DBTX) (db.JobQueue, error) {
		return queries.JobGetByID(ctx, q, db.JobGetByIDParams{OrganizationID: org, ID: req.JobID})
	})
	miss := txn.Queue(b, "classify requeue miss", func(q db.DBTX) ([]db.JobGetForBulkRequeueClassificationRow, error) {
		return queries.JobGetForBulkRequeueClassification(ctx, q, db.JobGetForBulkRequeueClassificationParams{
			OrganizationID: org, Ids: []uuid.UUID{req.JobID}, ExpectedStatuses: []string{string(req.ExpectedStatus)},
			ExpectedRunNumbers: []int32{req.ExpectedRunNumber},
		})
	})
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	if errors.Is(job.Err, pgx.ErrNoRows) {
		out.Err = pgx.ErrNoRows
		return out, nil
	}
	if job.Err != nil {
		return nil, job.Err
	}
	j := job.Val
	r := db.JobRequeueRow{
		ID: j.ID, JobType: j.JobType, OrganizationID: j.OrganizationID, Payload: j.Payload, Status: j.Status,
		Priority: j.Priority, RunNumber: j.RunNumber, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		TimeoutSeconds: j.TimeoutSeconds, NextRunAt: j.NextRunAt, LeaseExpiresAt: j.LeaseExpiresAt,
		LastHeartbeatAt: j.LastHeartbeatAt, WorkerID: j.WorkerID, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Stage: j.Stage, ProgressDone: j.ProgressDone, ProgressTotal: j.ProgressTotal, ProgressPct: j.ProgressPct,
		Checkpoint: j.Checkpoint, IdempotencyKey: j.IdempotencyKey, StatusReason: j.StatusReason,
		LastErrorCode: j.LastErrorCode, LastErrorMessage: j.LastErrorMessage, CreatedAt: j.CreatedAt,
		UpdatedAt: j.UpdatedAt, EnqueueRequest: j.EnqueueRequest, Output: j.Output,
		ExecutionResourceKey: j.ExecutionResourceKey,
	}
	for _, m := range miss.Val {
		if m.ID == req.JobID {
			r.WorkflowManaged, r.LeaseLive, r.RequeuedReason, r.RequeuedFrom = m.WorkflowManaged, m.LeaseLive, m.RequeuedReason, m.RequeuedFrom
		}
	}
	out.Val = r
	return out, nil
}

// decide turns an attempt's row into the outcome, or asks for another
// attempt. It checks the invariants the statement promises.
func decide(req Request, step *txn.Step[db.JobRequeueRow]) (out Outcome, retry bool, err error) {
	if !step.Row() {
		return NotFound{}, false, nil
	}
	row := step.Val
	if row.Requeued {
		out, err := requeued(req, row)
		return out, false, err
	}
	job, err := rows.Job(afterColumns(row))
	if err != nil {
		return nil, false, err
	}
	if string(job.Status) == string(req.ExpectedStatus) && job.RunNumber == req.ExpectedRunNumber {
		switch {
		case row.WorkflowManaged:
			return nil, false, errs.WorkflowManaged.Newf("job %s is owned by a workflow step: workflow managed job requeue is not supported", req.JobID)
		case row.LeaseLive:
			if job.LeaseExpiresAt == nil {
				return nil, false, errs.Invariant("canceled job with a live lease has no lease expiry")
			}
			return NotQuiesced{Actual: job, RetryAfter: *job.LeaseExpiresAt}, false, nil
		}
		return nil, true, nil
	}
	if row.RequeuedReason != nil && *row.RequeuedReason == req.Reason &&
		(row.RequeuedFrom == nil || *row.RequeuedFrom == string(req.ExpectedStatus)) {
		if job.RunNumber <= req.ExpectedRunNumber {
			return nil, false, errs.Invariantf("job %s has a REQUEUED event for run %d but is at run %d", req.JobID, req.ExpectedRunNumber, job.RunNumber)
		}
		return Requeued{Disposition: runledger.DispositionExisting, After: job}, false, nil
	}
	return ExpectationMismatch{Actual: job}, false, nil
}

// afterColumns is the job of a requeue statement's row: after the requeue
// when it requeued, as the snapshot saw it otherwise.
func afterColumns(row db.JobRequeueRow) db.JobQueue {
	return db.JobQueue{
		ID: row.ID, JobType: row.JobType, OrganizationID: row.OrganizationID, Payload: row.Payload, Status: row.Status,
		Priority: row.Priority, RunNumber: row.RunNumber, Attempt: row.Attempt, MaxAttempts: row.MaxAttempts,
		TimeoutSeconds: row.TimeoutSeconds, NextRunAt: row.NextRunAt, LeaseExpiresAt: row.LeaseExpiresAt,
		LastHeartbeatAt: row.LastHeartbeatAt, WorkerID: row.WorkerID, StartedAt: row.StartedAt, FinishedAt: row.FinishedAt,
		Stage: row.Stage, ProgressDone: row.ProgressDone, ProgressTotal: row.ProgressTotal, ProgressPct: row.ProgressPct,
		Checkpoint: row.Checkpoint, IdempotencyKey: row.IdempotencyKey, StatusReason: row.StatusReason,
		LastErrorCode: row.LastErrorCode, LastErrorMessage: row.LastErrorMessage, CreatedAt: row.CreatedAt,
		UpdatedAt: row.UpdatedAt, EnqueueRequest: row.EnqueueRequest, Output: row.Output, ExecutionResourceKey: row.ExecutionResourceKey,
	}
}

// requeued checks the locking update's row of an attempt that requeued
// and builds the job before and after it.
func requeued(req Request, row db.JobRequeueRow) (Outcome, error) {
	after, err := rows.Job(afterColumns(row))
	if err != nil {
		return nil, err
	}
	before, err := rows.Job(db.JobQueue{
		ID: row.ID, JobType: row.JobType, OrganizationID: row.OrganizationID, Payload: row.Payload, Status: row.BeforeStatus,
		Priority: row.Priority, RunNumber: row.BeforeRunNumber, Attempt: row.BeforeAttempt, MaxAttempts: row.MaxAttempts,
		TimeoutSeconds: row.TimeoutSeconds, NextRunAt: row.BeforeNextRunAt, LeaseExpiresAt: row.BeforeLeaseExpiresAt,
		LastHeartbeatAt: row.BeforeLastHeartbeatAt, WorkerID: row.BeforeWorkerID, StartedAt: row.BeforeStartedAt,
		FinishedAt: row.BeforeFinishedAt, Stage: row.BeforeStage, ProgressDone: row.BeforeProgressDone,
		ProgressTotal: row.BeforeProgressTotal, ProgressPct: row.BeforeProgressPct, Checkpoint: row.BeforeCheckpoint,
		IdempotencyKey: row.IdempotencyKey, StatusReason: row.BeforeStatusReason, LastErrorCode: row.BeforeLastErrorCode,
		LastErrorMessage: row.BeforeLastErrorMessage, CreatedAt: row.CreatedAt, UpdatedAt: row.BeforeUpdatedAt,
		Output: row.BeforeOutput, ExecutionResourceKey: row.ExecutionResourceKey,
	})
	if err != nil {
		return nil, err
	}
	switch {
	case after.ID != req.JobID:
		return nil, errs.Invariant("requeue returned another job than requested")
	case string(before.Status) != string(req.ExpectedStatus) || before.RunNumber != req.ExpectedRunNumber:
		return nil, errs.Invariantf("requeue locked a job %s at run %d, want %s at run %d", before.Status, before.RunNumber, req.ExpectedStatus, req.ExpectedRunNumber)
	case after.Status != runledger.JobStatusPending || after.RunNumber != req.ExpectedRunNumber+1 || after.Attempt != 0:
		return nil, errs.Invariantf("requeued job is %s at run %d attempt %d, want PENDING at run %d attempt 0", after.Status, after.RunNumber, after.Attempt, req.ExpectedRunNumber+1)
	case row.EventCount != 1:
		return nil, errs.Invariantf("requeue wrote %d events, want 1", row.EventCount)
	}
	id := row.EventID
	return Requeued{Disposition: runledger.DispositionInserted, Before: &before, After: after, EventID: &id}, nil
}
