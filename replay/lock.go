package replay

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/rows"
)

// The source lock loop: lock the source while it is eligible, or tell why
// it is not.

// lockTokens numbers the attempts of the lock loop in this process; an
// attempt's token marks, in the transaction, that its locking read took
// the source (JobLockForReplay). A transaction is used by one
// process, so the numbers are unique where they are compared.
var lockTokens atomic.Uint64

// lockAttempt is what one round trip of the lock loop returns.
type lockAttempt struct {
	locked   *db.JobLockForReplayRow              // nil: the locking read missed
	existing *lineage                             // second lookup; only after a lock
	actual   *db.JobGetForReplayClassificationRow // classification; only after a miss
}

// lockSource locks the source FOR NO KEY UPDATE while it is eligible (in
// scope, SUCCEEDED at the expected run, not workflow-managed), and then
// looks up the lineage again. When the locking read finds nothing, an
// unlocked read tells why: NotFound, ExpectationMismatch, the
// workflow-managed error, or, if the row is eligible after all (it changed
// between the statements), another attempt.
//
// Each attempt is one round trip carrying three statements: the locking
// read, the second lineage lookup and the classification read. The last two
// are made conditional in SQL on the first (through a transaction-local
// marker the locking read sets only when it returns the row): after a lock
// the lookup runs and the classification reads nothing; after a miss the
// lookup reads and locks nothing and the classification runs. So no
// statement runs whose result is thrown away and that could have taken a
// lock, which a caller's transaction would otherwise keep until it ends.
func lockSource(ctx context.Context, s *session, req Request) (db.JobLockForReplayRow, Outcome, error) {
	var none db.JobLockForReplayRow
	for attempt := 1; attempt <= MaxSourceLockAttempts; attempt++ {
		failpoint.Inject(ctx, fpBeforeSourceLock, call(req, attempt))
		token := strconv.FormatUint(lockTokens.Add(1), 36)
		got, err := s.lockRoundTrip(ctx, req, token)
		if err != nil {
			return none, nil, err
		}
		if got.locked != nil {
			switch {
			case got.locked.WorkflowManaged:
				return none, nil, errs.Invariant("locked replay source is workflow-managed")
			case got.locked.LockToken != token:
				return none, nil, errs.Invariant("source lock marker holds another attempt's token")
			case got.actual != nil:
				return none, nil, errs.Invariant("classification read ran although the source lock succeeded")
			}
			if got.existing != nil {
				out, err := existingOutcome(req, *got.existing)
				return none, out, err
			}
			return *got.locked, nil, nil
		}
		if got.existing != nil {
			return none, nil, errs.Invariant("second lineage lookup ran although the source lock missed")
		}
		failpoint.Inject(ctx, fpAfterLockMiss, call(req, attempt))

		actual := got.actual
		if actual != nil && eligible(req, *actual) && actual.WorkflowManaged {
			// The one verdict that ends the call with an error rather than
			// an outcome or another attempt is read again, in a statement
			// of its own after the fpAfterLockMiss failpoint: workflow
			// membership may be what changed between the locking read and
			// the pipelined read.
			// An error path only, so the extra round trip is never on a
			// measured path.
			actual, err = s.classify(ctx, req, token)
			if err != nil {
				return none, nil, err
			}
		}
		if actual == nil {
			return none, NotFound{}, nil
		}
		if !eligible(req, *actual) {
			job, err := rows.JobJSON(actual.Job)
			if err != nil {
				return none, nil, err
			}
			return none, ExpectationMismatch{Actual: job}, nil
		}
		if actual.WorkflowManaged {
			return none, nil, errs.WorkflowManaged.New("workflow managed job requeue is not supported")
		}
		// Eligible now, but not when the locking read ran: its snapshot was
		// older. Retry with a fresh one.
	}
	return none, nil, errs.ReplaySourceUnstable.Newf(
		"job replay source %s stayed eligible to the unlocked read but not to the locking read after %d attempts",
		req.SourceJobID, MaxSourceLockAttempts)
}

func eligible(req Request, j db.JobGetForReplayClassificationRow) bool {
	return j.Status == db.JobStatusSUCCEEDED && j.RunNumber == req.ExpectedRunNumber
}

// lockRoundTrip sends one attempt's three statements in one batch.
func (s *session) lockRoundTrip(ctx context.Context, req Request, token string) (lockAttempt, error) {
	org := req.Scope.OrganizationIDPtr()
	lock := db.JobLockForReplayParams{
		LockToken: token, ID: req.SourceJobID, OrganizationID: org, ExpectedRunNumber: req.ExpectedRunNumber,
	}
	after := db.JobReplayGetForRequestAfterSourceLockParams{
		SourceJobID: req.SourceJobID, SourceRunNumber: req.ExpectedRunNumber, ReplayRequestKey: req.Key,
		OrganizationID: org, LockToken: token, Reason: req.Reason,
	}
	classify := db.JobGetForReplayClassificationParams{ID: req.SourceJobID, OrganizationID: org, LockToken: token}

	var p pipeline
	locked := queue(&p, func(q db.DBTX) (db.JobLockForReplayRow, error) {
		return queries.JobLockForReplay(ctx, q, lock)
	})
	again := queue(&p, func(q db.DBTX) (db.JobReplayGetForRequestAfterSourceLockRow, error) {
		return queries.JobReplayGetForRequestAfterSourceLock(ctx, q, after)
	})
	actual := queue(&p, func(q db.DBTX) (db.JobGetForReplayClassificationRow, error) {
		return queries.JobGetForReplayClassification(ctx, q, classify)
	})
	batchErr := p.send(ctx, s.c)

	var got lockAttempt
	switch i, err := firstError(batchErr, locked.err, again.err, actual.err); i {
	case -1:
	case 0:
		return got, dberr.Translate(ctx, "lock successful job replay source", err)
	case 1:
		return got, dberr.Translate(ctx, "load existing job replay", err)
	default:
		return got, dberr.Translate(ctx, "read successful job replay mismatch", err)
	}
	if locked.err == nil {
		got.locked = &locked.val
	}
	if again.err == nil {
		got.existing = &lineage{replayJobID: again.val.ReplayJobID, reason: again.val.Reason,
			status: again.val.ReplayStatus, runNumber: again.val.ReplayRunNumber}
	}
	if actual.err == nil {
		got.actual = &actual.val
	}
	return got, nil
}

// classify reads the source for classification in a statement of its own,
// after this attempt's locking read (marked by token) missed; nil when
// there is no such job in the caller's scope.
func (s *session) classify(ctx context.Context, req Request, token string) (*db.JobGetForReplayClassificationRow, error) {
	row, err := queries.JobGetForReplayClassification(ctx, uuidConn{s.c}, db.JobGetForReplayClassificationParams{
		ID: req.SourceJobID, OrganizationID: req.Scope.OrganizationIDPtr(), LockToken: token,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dberr.Translate(ctx, "read successful job replay mismatch", err)
	}
	return &row, nil
}
