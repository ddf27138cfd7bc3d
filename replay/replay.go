// Package replay implements compare-and-replay of a succeeded job: given a
// job that finished SUCCEEDED at a run the caller observed, it creates a
// fresh job with the same type, tenant, payload and settings, records the
// lineage and one ENQUEUED audit event, and never touches the source.
//
// The operation is idempotent per (source, run, request key): a retry with
// the same key and reason returns the replay made the first time; the same
// key with another reason is a Conflict. Concurrent identical requests
// resolve to one replay: they serialize on the source row (FOR NO KEY
// UPDATE) and the later one finds the earlier one's lineage once it gets
// the lock, which is correct only under READ COMMITTED, hence the isolation
// rules of the two entry points.
//
// Locks: an Existing outcome locks the replay job FOR NO KEY UPDATE until
// the transaction ends; the insert path locks the source FOR NO KEY UPDATE
// and the job type's definition FOR SHARE; a conflict found before the
// source lock, a mismatch and a NotFound lock nothing.
package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
)

// MaxSourceLockAttempts bounds the source lock loop. The loop repeats only
// when the locking read found nothing but the unlocked read a moment later
// saw an eligible source (the row changed between the two statements); it
// converges at once in practice. Past the bound the operation fails with
// job.replay_source_unstable rather than report a mismatch whose actual
// state equals the expectation.
const MaxSourceLockAttempts = 4

const ownedOperation = "successful job replay"

// SucceededJob replays a succeeded job in a transaction of its own.
//
// It validates the request before taking a connection (an invalid request
// fails the same way on a closed pool), begins a READ COMMITTED transaction
// (overriding any session default), and commits every outcome, including
// ExpectationMismatch and NotFound, which wrote nothing. Any error rolls
// back. A failed COMMIT returns an error matching
// runledger.ErrCommitUnconfirmed: the replay may or may not exist; repeat
// the call with the same key and reason to find out (it is idempotent).
// If ctx ends while waiting for a lock, it rolls back and returns an error
// wrapping ctx's error.
func SucceededJob(ctx context.Context, pool *pgxpool.Pool, req Request) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return txn.ReadCommitted(ctx, pool, ownedOperation, func(tx pgx.Tx) (Outcome, error) {
		return run(ctx, tx, req)
	})
}

// SucceededJobTx replays a succeeded job inside the caller's transaction,
// which it never commits or rolls back.
//
// It validates the request, then refuses any isolation level but READ
// COMMITTED (runledger.ErrReplayUnsupportedIsolation), since the protocol
// relies on each statement seeing what concurrent replays committed. Locks
// it takes last until the caller's transaction ends: after an Existing
// outcome workers skip the replay job, and after a conflict found once the
// source was locked the source stays locked. On an error the caller should
// roll back.
func SucceededJobTx(ctx context.Context, tx pgx.Tx, req Request) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := txn.RequireReadCommitted(ctx, tx, "successful job compare-and-replay", runledger.ErrReplayUnsupportedIsolation); err != nil {
		return nil, err
	}
	return run(ctx, tx, req)
}

var queries = db.New()

// run is the body shared by both entry points; tx is READ COMMITTED.
func run(ctx context.Context, tx pgx.Tx, req Request) (Outcome, error) {
	// 1. Lineage first: an idempotent retry ends here, whatever the source's
	// state is now, holding only the replay row lock.
	if out, err := findExisting(ctx, tx, req); out != nil || err != nil {
		return out, err
	}
	failpoint.Inject(ctx, failpoint.ReplayAfterLookup, call(req, 0))
	// 2. Lock the source while it is eligible, or classify why it is not.
	source, out, err := lockSource(ctx, tx, req)
	if out != nil || err != nil {
		return out, err
	}
	// 3. A concurrent identical request may have committed its replay while
	// this one waited for the source lock; it wrote the lineage before
	// releasing the lock, so this statement's fresh snapshot sees it.
	if out, err := findExisting(ctx, tx, req); out != nil || err != nil {
		return out, err
	}
	failpoint.Inject(ctx, failpoint.ReplayAfterSourceLock, call(req, 0))
	// 4. Create the replay, its event and the lineage in one statement.
	out, err = insertReplay(ctx, tx, req, source)
	if err == nil {
		failpoint.Inject(ctx, failpoint.ReplayAfterInsert, call(req, 0))
	}
	return out, err
}

func call(req Request, attempt int) failpoint.ReplayCall {
	return failpoint.ReplayCall{SourceJobID: req.SourceJobID, Key: req.Key, Attempt: attempt}
}

// findExisting looks up the lineage of (source, expected run, key) in the
// caller's scope. It returns nil, nil when there is none; Replayed
// (Existing) when the stored reason matches, having locked the replay row
// FOR NO KEY UPDATE; the conflict error, with nothing locked, when it
// does not.
func findExisting(ctx context.Context, tx pgx.Tx, req Request) (Outcome, error) {
	row, err := queries.JobReplayGetForRequest(ctx, tx, db.JobReplayGetForRequestParams{
		SourceJobID:      req.SourceJobID,
		SourceRunNumber:  req.ExpectedRunNumber,
		ReplayRequestKey: req.Key,
		OrganizationID:   req.Scope.OrganizationIDPtr(),
		Reason:           req.Reason,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dberr.Translate(ctx, "load existing job replay", err)
	}
	return existingOutcome(req, row)
}

func existingOutcome(req Request, row db.JobReplayGetForRequestRow) (Outcome, error) {
	if row.Reason != req.Reason {
		return nil, runledger.New(runledger.ErrReplayIdempotencyConflict,
			"job replay request reused its key with different request metadata")
	}
	if row.ReplayStatus == nil || row.ReplayRunNumber == nil {
		// The lineage row exists but its replay job could not be read: it was
		// deleted after this statement's snapshot was taken.
		return nil, runledger.Internal(runledger.CodeReplayIdempotencyConflictMissingExisting,
			"Job replay retry could not be resolved.",
			"job replay lineage referenced an existing replay job that could not be loaded")
	}
	status, err := rows.Status(*row.ReplayStatus)
	if err != nil {
		return nil, err
	}
	return Replayed{
		SourceJobID:     req.SourceJobID,
		SourceRunNumber: req.ExpectedRunNumber,
		Disposition:     DispositionExisting,
		Replay:          ReplayJob{JobID: row.ReplayJobID, Status: status, RunNumber: *row.ReplayRunNumber},
	}, nil
}

// lockSource locks the source FOR NO KEY UPDATE while it is eligible (in
// scope, SUCCEEDED at the expected run, not workflow-managed). When the
// locking read finds nothing, an unlocked read tells why: NotFound,
// ExpectationMismatch, the workflow-managed error, or, if the row is
// eligible after all (it changed between the statements), another attempt.
func lockSource(ctx context.Context, tx pgx.Tx, req Request) (db.JobQueue, Outcome, error) {
	for attempt := 1; attempt <= MaxSourceLockAttempts; attempt++ {
		failpoint.Inject(ctx, failpoint.ReplayBeforeSourceLock, call(req, attempt))
		locked, err := queries.JobLockEligibleReplaySource(ctx, tx, db.JobLockEligibleReplaySourceParams{
			ID:                req.SourceJobID,
			OrganizationID:    req.Scope.OrganizationIDPtr(),
			ExpectedRunNumber: req.ExpectedRunNumber,
		})
		if err == nil {
			if locked.WorkflowManaged {
				return db.JobQueue{}, nil, runledger.InvariantViolated("locked replay source is workflow-managed")
			}
			return locked.JobQueue, nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return db.JobQueue{}, nil, dberr.Translate(ctx, "lock successful job replay source", err)
		}
		failpoint.Inject(ctx, failpoint.ReplayAfterLockMiss, call(req, attempt))

		actual, err := queries.JobGetReplaySourceForClassification(ctx, tx, db.JobGetReplaySourceForClassificationParams{
			ID:             req.SourceJobID,
			OrganizationID: req.Scope.OrganizationIDPtr(),
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return db.JobQueue{}, NotFound{}, nil
		}
		if err != nil {
			return db.JobQueue{}, nil, dberr.Translate(ctx, "read successful job replay mismatch", err)
		}
		eligible := actual.JobQueue.Status == db.JobStatusSUCCEEDED && actual.JobQueue.RunNumber == req.ExpectedRunNumber
		if !eligible {
			job, err := rows.Job(actual.JobQueue)
			if err != nil {
				return db.JobQueue{}, nil, err
			}
			return db.JobQueue{}, ExpectationMismatch{Actual: job}, nil
		}
		if actual.WorkflowManaged {
			return db.JobQueue{}, nil, runledger.New(runledger.ErrWorkflowManaged, "workflow managed job requeue is not supported")
		}
		// Eligible now, but not when the locking read ran: its snapshot was
		// older. Retry with a fresh one.
	}
	return db.JobQueue{}, nil, runledger.New(runledger.ErrReplaySourceUnstable,
		fmt.Sprintf("job replay source %s stayed eligible to the unlocked read but not to the locking read after %d attempts",
			req.SourceJobID, MaxSourceLockAttempts))
}

// insertReplay creates the replay of the locked source.
func insertReplay(ctx context.Context, tx pgx.Tx, req Request, source db.JobQueue) (Outcome, error) {
	if key := source.ExecutionResourceKey; key != nil {
		if err := runledger.ValidateExecutionResourceKey(*key); err != nil {
			return nil, err
		}
	}
	replayID, err := uuid.NewV7()
	if err != nil {
		return nil, runledger.Internal(runledger.CodeInvariantViolated, "Job id could not be generated.", "generate replay job id: "+err.Error())
	}
	row, err := queries.JobInsertReplay(ctx, tx, db.JobInsertReplayParams{
		SourceJobID:      source.ID,
		ReplayJobID:      replayID,
		ReplayRequestKey: req.Key,
		Reason:           req.Reason,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, runledger.New(runledger.ErrDefinitionNotFoundOrDisabled,
			fmt.Sprintf("enqueue job: definition missing or disabled for job type %q", source.JobType))
	}
	if err != nil {
		return nil, dberr.Translate(ctx, "record successful job replay", err)
	}
	switch {
	case row.ID != replayID || row.SourceJobID != source.ID || row.SourceRunNumber != source.RunNumber:
		return nil, runledger.InvariantViolated("replay insert returned another job or source than requested")
	case row.Status != db.JobStatusPENDING || row.RunNumber != 1:
		return nil, runledger.InvariantViolated(fmt.Sprintf("new replay job is %s at run %d, want PENDING at run 1", row.Status, row.RunNumber))
	case row.EventCount != 1 || row.LineageCount != 1:
		return nil, runledger.InvariantViolated(fmt.Sprintf("replay insert wrote %d events and %d lineage rows, want 1 and 1", row.EventCount, row.LineageCount))
	}
	return Replayed{
		SourceJobID:     row.SourceJobID,
		SourceRunNumber: row.SourceRunNumber,
		Disposition:     DispositionInserted,
		Replay:          ReplayJob{JobID: row.ID, Status: runledger.JobStatusPending, RunNumber: row.RunNumber},
	}, nil
}
