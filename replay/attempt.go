package replay

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/wake"
)

// One attempt of the protocol: its statements in one round trip, then the
// verdict on their results.

// lockTokens numbers the attempts in this process. An attempt's statements
// guard each other through the transaction-local marker runledger.replay,
// which holds the attempt's token and what the statements so far found; a
// token is unique within the transaction that compares it.
var lockTokens atomic.Uint64

// replayWakeKey is the wake limiter's key for replays (see package
// internal/wake).
const replayWakeKey = "\x00replay"

// attempt holds the results of one attempt's statements.
type attempt struct {
	token    string
	lookup   *txn.Step[db.JobReplayGetForRequestRow]
	lock     *txn.Step[db.JobLockForReplayRow]
	again    *txn.Step[db.JobReplayGetForRequestAfterSourceLockRow]
	classify *txn.Step[db.JobGetForReplayClassificationRow]
	insert   *txn.Step[db.JobReplayInsertRow]
	replayID uuid.UUID
}

// sendAttempt sends one attempt of the protocol in one round trip: [BEGIN
// READ COMMITTED,] the lineage lookup (with the isolation probe), the
// source lock, the second lookup, the classification read, the insert[,
// COMMIT]. Each statement after the first runs only on the branch the ones
// before it took (guarded in SQL by runledger.replay): a lookup hit turns
// off everything after it; a lock miss turns off the second lookup and the
// insert, a lock hit the classification read; a second-lookup hit turns
// off the insert. A guarded-off statement reads nothing and locks no row.
// Each runs with its own READ COMMITTED snapshot, taken after the one
// before it finished, lock waits included.
func sendAttempt(ctx context.Context, s *txn.Session, req Request, n int) (*attempt, error) {
	replayID, err := uuid.NewV7()
	if err != nil {
		return nil, errs.JobIDFailed.New("generate replay job id: " + err.Error())
	}
	a := &attempt{token: strconv.FormatUint(lockTokens.Add(1), 36), replayID: replayID}
	// The replay's job type is the source's, unknown until the lock: one
	// limiter key for every replay.
	notify := wake.Due(replayWakeKey)
	org := req.Scope.OrganizationIDPtr()
	missing := a.token + "/missing"
	c := call(req, n)

	lookupOp := "load existing job replay"
	if !s.Owned() {
		lookupOp = "inspect transaction isolation and load existing job replay"
	}
	b := s.Batch(ctx)
	a.lookup = txn.Queue(b, lookupOp, func(q db.DBTX) (db.JobReplayGetForRequestRow, error) {
		return queries.JobReplayGetForRequest(ctx, q, db.JobReplayGetForRequestParams{
			SourceJobID: req.SourceJobID, SourceRunNumber: req.ExpectedRunNumber, ReplayRequestKey: req.Key,
			OrganizationID: org, Reason: req.Reason, Token: a.token,
		})
	})
	lookupMissed := func() bool { return a.lookup.Row() && a.lookup.Val.Marker == missing }
	if n == 1 {
		b.PointIf(fpAfterLookup, c, lookupMissed)
	}
	b.PointIf(fpBeforeSourceLock, c, lookupMissed)
	a.lock = txn.Queue(b, "lock successful job replay source", func(q db.DBTX) (db.JobLockForReplayRow, error) {
		return queries.JobLockForReplay(ctx, q, db.JobLockForReplayParams{
			ID: req.SourceJobID, OrganizationID: org, ExpectedRunNumber: req.ExpectedRunNumber, Token: a.token,
		})
	})
	a.again = txn.Queue(b, "load existing job replay", func(q db.DBTX) (db.JobReplayGetForRequestAfterSourceLockRow, error) {
		return queries.JobReplayGetForRequestAfterSourceLock(ctx, q, db.JobReplayGetForRequestAfterSourceLockParams{
			SourceJobID: req.SourceJobID, SourceRunNumber: req.ExpectedRunNumber, ReplayRequestKey: req.Key,
			OrganizationID: org, Reason: req.Reason, Token: a.token,
		})
	})
	a.classify = txn.Queue(b, "read successful job replay mismatch", func(q db.DBTX) (db.JobGetForReplayClassificationRow, error) {
		return queries.JobGetForReplayClassification(ctx, q, db.JobGetForReplayClassificationParams{
			ID: req.SourceJobID, OrganizationID: org, RunIf: &missing,
		})
	})
	b.PointIf(fpAfterLockMiss, c, func() bool { return lookupMissed() && !a.lock.Row() })
	b.PointIf(fpAfterSourceLock, c, func() bool { return a.lock.Row() && !a.again.Row() })
	a.insert = txn.Queue(b, "record successful job replay", func(q db.DBTX) (db.JobReplayInsertRow, error) {
		return queries.JobReplayInsert(ctx, q, db.JobReplayInsertParams{
			SourceJobID: req.SourceJobID, ReplayJobID: replayID, ReplayRequestKey: req.Key, Reason: req.Reason, Token: a.token,
			Notify: notify,
		})
	})
	b.PointIf(fpAfterInsert, c, func() bool { return a.insert.Row() })
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// decide turns an attempt's results into the outcome, or asks for another
// attempt. It checks that the guards held: a statement the marker turned
// off returned nothing.
func decide(ctx context.Context, s *txn.Session, req Request, a *attempt) (out Outcome, retry bool, err error) {
	if !a.lookup.Row() { // the statement always returns one row
		return nil, false, errs.Invariant("lineage lookup returned no row")
	}
	l := a.lookup.Val
	switch {
	case !txn.IsReadCommitted(l.Isolation) && s.Owned():
		return nil, false, errs.Invariantf("owned replay transaction runs at %s, not READ COMMITTED", l.Isolation)
	case !txn.IsReadCommitted(l.Isolation):
		if a.lock.Row() || a.again.Row() || a.classify.Row() || a.insert.Row() {
			return nil, false, errs.Invariant("replay statements ran under a refused isolation level")
		}
		return nil, false, txn.CheckIsolation(l.Isolation, txOperation, errs.ReplayUnsupportedIsolation)
	}
	found, err := lineageOf(l)
	if err != nil {
		return nil, false, err
	}
	if found != nil {
		if l.Marker != a.token+"/found" || a.lock.Row() || a.again.Row() || a.classify.Row() || a.insert.Row() {
			return nil, false, errs.Invariant("replay statements ran after a lineage hit")
		}
		out, err := existingOutcome(req, *found)
		return out, false, err
	}
	if a.lock.Row() {
		locked := a.lock.Val
		switch {
		case locked.WorkflowManaged:
			return nil, false, errs.Invariant("locked replay source is workflow-managed")
		case locked.Marker != a.token+"/locked":
			return nil, false, errs.Invariant("source lock marker holds another attempt's token")
		case a.classify.Row():
			return nil, false, errs.Invariant("classification read ran although the source lock succeeded")
		}
		if a.again.Row() {
			if a.insert.Row() {
				return nil, false, errs.Invariant("replay inserted although the second lookup found lineage")
			}
			v := a.again.Val
			out, err := existingOutcome(req, lineage{replayJobID: v.ReplayJobID, reason: v.Reason, status: v.ReplayStatus, runNumber: v.ReplayRunNumber})
			return out, false, err
		}
		out, err := inserted(s, req, a, locked)
		return out, false, err
	}
	if a.again.Row() || a.insert.Row() {
		return nil, false, errs.Invariant("replay statements ran although the source lock missed")
	}
	var actual *db.JobGetForReplayClassificationRow
	if a.classify.Row() {
		actual = &a.classify.Val
	}
	if actual != nil && eligible(req, *actual) && actual.WorkflowManaged {
		// The one verdict that ends the call with an error rather than an
		// outcome or another attempt is read again in a statement of its
		// own: workflow membership may be what changed between the locking
		// read and the classification read. An error path only.
		if actual, err = reclassify(ctx, s, req); err != nil {
			return nil, false, err
		}
	}
	switch {
	case actual == nil:
		return NotFound{}, false, nil
	case !eligible(req, *actual):
		job, err := rows.JobJSON(actual.Job)
		if err != nil {
			return nil, false, err
		}
		return ExpectationMismatch{Actual: job}, false, nil
	case actual.WorkflowManaged:
		return nil, false, errs.WorkflowManaged.New("workflow managed job requeue is not supported")
	}
	return nil, true, nil
}

func eligible(req Request, j db.JobGetForReplayClassificationRow) bool {
	return j.Status == db.JobStatusSUCCEEDED && j.RunNumber == req.ExpectedRunNumber
}

// reclassify reads the source for classification in a statement of its
// own (unguarded); nil when there is no such job in the caller's scope.
func reclassify(ctx context.Context, s *txn.Session, req Request) (*db.JobGetForReplayClassificationRow, error) {
	row, err := queries.JobGetForReplayClassification(ctx, s.DB(), db.JobGetForReplayClassificationParams{
		ID: req.SourceJobID, OrganizationID: req.Scope.OrganizationIDPtr(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dberr.Translate(ctx, "read successful job replay mismatch", err)
	}
	return &row, nil
}

// inserted checks the insert of an attempt that locked the source and
// found no lineage after the lock.
func inserted(s *txn.Session, req Request, a *attempt, source db.JobLockForReplayRow) (Outcome, error) {
	if !a.insert.Row() {
		// Nothing was written: the statement inserts only through an
		// enabled definition.
		return nil, errs.DefinitionUnavailableFor(source.JobType)
	}
	row := a.insert.Val
	committed := ""
	if s.Owned() {
		committed = " (the transaction committed)"
	}
	switch {
	case row.ID != a.replayID || row.SourceJobID != source.ID || row.SourceRunNumber != source.RunNumber:
		return nil, errs.Invariant("replay insert returned another job or source than requested" + committed)
	case row.Status != db.JobStatusPENDING || row.RunNumber != 1:
		return nil, errs.Invariantf("new replay job is %s at run %d, want PENDING at run 1%s", row.Status, row.RunNumber, committed)
	case row.EventCount != 1 || row.LineageCount != 1:
		return nil, errs.Invariantf("replay insert wrote %d events and %d lineage rows, want 1 and 1%s", row.EventCount, row.LineageCount, committed)
	}
	return Replayed{
		SourceJobID:     row.SourceJobID,
		SourceRunNumber: row.SourceRunNumber,
		Disposition:     runledger.DispositionInserted,
		Replay:          Job{JobID: row.ID, Status: runledger.JobStatusPending, RunNumber: row.RunNumber},
	}, nil
}
