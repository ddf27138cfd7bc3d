package replay

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/internal/wake"
)

// One attempt of the protocol: its statements in one round trip, then the
// verdict on their results.

// replayWakeKey is the wake limiter's key for replays (see package
// internal/wake).
const replayWakeKey = "\x00replay"

// attempt holds the results of one attempt's statements.
type attempt struct {
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
// COMMIT]; on Citus the insert's part differs (sendRoutedInsert). Every statement runs; each one's guard is in the data, so that
// it is right on whatever connection runs it (on Citus, the tenant's
// worker): the source lock takes only an eligible source without lineage
// for the request, and the insert writes only for such a source, which it
// locks itself. Each statement runs with its own READ COMMITTED snapshot,
// taken after the one before it finished, lock waits included.
func sendAttempt(ctx context.Context, s *txn.Session, req Request, n int) (*attempt, error) {
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	replayID, err := uuid.NewV7()
	if err != nil {
		return nil, errs.JobIDFailed.New("generate replay job id: " + err.Error())
	}
	a := &attempt{replayID: replayID}
	org := rows.Tenant(req.Scope)
	c := call(req, n)

	lookupOp := "load existing job replay"
	if !s.Owned() {
		lookupOp = "inspect transaction isolation and load existing job replay"
	}
	b := s.Batch(ctx)
	a.lookup = txn.Queue(b, lookupOp, func(q db.DBTX) (db.JobReplayGetForRequestRow, error) {
		return queries.JobReplayGetForRequest(ctx, q, db.JobReplayGetForRequestParams{
			OrganizationID: org, SourceJobID: req.SourceJobID, SourceRunNumber: req.ExpectedRunNumber,
			ReplayRequestKey: req.Key, Reason: req.Reason,
		})
	})
	lookupMissed := func() bool { return a.lookup.Row() && a.lookup.Val.ReplayJobID == nil }
	lockMissed := func() bool { return lookupMissed() && !a.lock.Row() }
	if n == 1 {
		b.PointIf(fpAfterLookup, c, lookupMissed)
	}
	b.PointIf(fpBeforeSourceLock, c, lookupMissed)
	a.lock = txn.Queue(b, "lock successful job replay source", func(q db.DBTX) (db.JobLockForReplayRow, error) {
		return queries.JobLockForReplay(ctx, q, db.JobLockForReplayParams{
			OrganizationID: org, ID: req.SourceJobID, ExpectedRunNumber: req.ExpectedRunNumber, ReplayRequestKey: req.Key,
		})
	})
	b.PointIf(fpAfterLockMiss, c, lockMissed)
	a.again = txn.Queue(b, "load existing job replay", func(q db.DBTX) (db.JobReplayGetForRequestAfterSourceLockRow, error) {
		return queries.JobReplayGetForRequestAfterSourceLock(ctx, q, db.JobReplayGetForRequestAfterSourceLockParams{
			OrganizationID: org, SourceJobID: req.SourceJobID, SourceRunNumber: req.ExpectedRunNumber,
			ReplayRequestKey: req.Key, Reason: req.Reason,
		})
	})
	a.classify = txn.Queue(b, "read successful job replay mismatch", func(q db.DBTX) (db.JobGetForReplayClassificationRow, error) {
		return queries.JobGetForReplayClassification(ctx, q, db.JobGetForReplayClassificationParams{
			OrganizationID: org, ExpectedRunNumber: req.ExpectedRunNumber, ID: req.SourceJobID,
		})
	})
	b.PointIf(fpAfterClassification, c, func() bool { return lockMissed() && !a.again.Row() })
	b.PointIf(fpAfterSourceLock, c, func() bool { return a.lock.Row() && !a.again.Row() })
	if dist {
		return a, sendRoutedInsert(ctx, s, req, a, b, c)
	}
	a.insert = txn.Queue(b, "record successful job replay", func(q db.DBTX) (db.JobReplayInsertRow, error) {
		return queries.JobReplayInsert(ctx, q, db.JobReplayInsertParams{
			OrganizationID: org, SourceJobID: req.SourceJobID, SourceRunNumber: req.ExpectedRunNumber,
			ReplayRequestKey: req.Key, ReplayJobID: replayID, Reason: req.Reason,
			Operator: validate.OperatorArg(req.Operator),
		})
	})
	// The replay's job type is the source's, unknown until the lock: one
	// limiter key for every replay, and a wake-up for every worker.
	if wake.Due(replayWakeKey) {
		wake.Queue(ctx, b, "")
	}
	b.PointIf(fpAfterInsert, c, func() bool { return a.insert.Row() })
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		if a.insert.Reached() && isUniqueViolation(a.insert.Err) {
			return nil, errLineageRace
		}
		return nil, firstBatchError(s, err)
	}
	return a, nil
}

// firstBatchError is the error of an attempt's batch that carries the
// lookup: in a caller's read-only transaction, the refusal of the
// lookup's locking read, the first statement such a transaction refuses;
// its refusal aborted the caller's transaction, and nothing was read or
// written.
func firstBatchError(s *txn.Session, err error) error {
	if !s.Owned() && isReadOnlyRefusal(err) {
		return errs.ReplayUnsupportedIsolation.Newf(
			"%s requires a read-write READ COMMITTED transaction; got a read-only one, which the refused statement aborted: roll it back", txOperation)
	}
	return err
}

// sendRoutedInsert ends an attempt on Citus, where JobReplayInsert runs in
// steps through the coordinator: b, the attempt's first round trip (from
// BEGIN to the classification read), gets JobReplaySourceRouted in the
// insert's place (the source locked and its definition share-locked under
// the insert's guards, with what the replay copies), and is sent. Then a
// second round trip: when the source was taken, the replay job
// (JobReplayJobRouted), its event (JobEventReplayEnqueued) and the lineage
// (JobReplayLineageRouted), each a plain INSERT ... VALUES that Citus runs
// in one step on the tenant's shard, and the workers' wake-up; then
// COMMIT. A caller's transaction whose source was not taken gets no
// second round trip. It fills a.insert with the row JobReplayInsert would
// have returned.
func sendRoutedInsert(ctx context.Context, s *txn.Session, req Request, a *attempt, b *txn.Batch, c failpointCall) error {
	org := rows.Tenant(req.Scope)
	source := txn.Queue(b, "lock successful job replay source and definition", func(q db.DBTX) (db.JobReplaySourceRoutedRow, error) {
		return queries.JobReplaySourceRouted(ctx, q, db.JobReplaySourceRoutedParams{
			OrganizationID: org, SourceJobID: req.SourceJobID, SourceRunNumber: req.ExpectedRunNumber, ReplayRequestKey: req.Key,
		})
	})
	if err := b.Send(ctx); err != nil {
		return firstBatchError(s, err)
	}
	a.insert = &txn.Step[db.JobReplayInsertRow]{Err: pgx.ErrNoRows}
	if !source.Row() && !s.Owned() {
		return nil
	}
	b = s.Batch(ctx)
	var job *txn.Step[db.JobReplayJobRoutedRow]
	var event, lineage *txn.Step[int64]
	if source.Row() {
		src := source.Val
		job = txn.Queue(b, "record successful job replay", func(q db.DBTX) (db.JobReplayJobRoutedRow, error) {
			return queries.JobReplayJobRouted(ctx, q, db.JobReplayJobRoutedParams{
				ReplayJobID: a.replayID, JobType: src.JobType, OrganizationID: org, Payload: src.Payload,
				Priority: src.Priority, MaxAttempts: src.MaxAttempts, TimeoutSeconds: src.TimeoutSeconds,
				ExecutionResourceKey: src.ExecutionResourceKey,
			})
		})
		// A new job's run and stage, as JobReplayJobRouted writes them;
		// inserted checks the row it returned.
		event = txn.Queue(b, "record successful job replay event", func(q db.DBTX) (int64, error) {
			return queries.JobEventReplayEnqueued(ctx, q, db.JobEventReplayEnqueuedParams{
				OrganizationID: org, JobID: a.replayID, RunNumber: 1, Stage: string(runledger.JobStageQueued),
				JobType: src.JobType, SourceJobID: src.ID, SourceRunNumber: src.RunNumber,
				ReplayRequestKey: req.Key, Reason: req.Reason, Operator: validate.OperatorArg(req.Operator),
			})
		})
		lineage = txn.Queue(b, "record successful job replay lineage", func(q db.DBTX) (int64, error) {
			return queries.JobReplayLineageRouted(ctx, q, db.JobReplayLineageRoutedParams{
				OrganizationID: org, SourceJobID: src.ID, SourceRunNumber: src.RunNumber,
				ReplayRequestKey: req.Key, ReplayJobID: a.replayID, Reason: req.Reason,
			})
		})
		// The replay's job type is the source's: one limiter key for
		// every replay, and a wake-up for every worker.
		if wake.Due(replayWakeKey) {
			wake.Queue(ctx, b, "")
		}
		b.Point(fpAfterInsert, c)
	}
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		if lineage != nil && lineage.Reached() && isUniqueViolation(lineage.Err) {
			return errLineageRace
		}
		return err
	}
	if source.Row() {
		if job.Val.Stage != string(runledger.JobStageQueued) {
			return errs.Invariantf("new replay job is at stage %s, want queued", job.Val.Stage)
		}
		a.insert.Err = nil
		a.insert.Val = db.JobReplayInsertRow{
			ID: job.Val.ID, Status: job.Val.Status, RunNumber: job.Val.RunNumber,
			SourceJobID: source.Val.ID, SourceRunNumber: source.Val.RunNumber,
			EventCount: event.Val, LineageCount: lineage.Val,
		}
	}
	return nil
}

// isReadOnlyRefusal reports PostgreSQL's refusal of a write or a locking
// read in a read-only transaction (SQLSTATE 25006).
func isReadOnlyRefusal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}

// errLineageRace is sendAttempt's report of an insert that lost a race:
// it waited for the source behind a concurrent replay of the same request,
// which committed the lineage first (the insert's snapshot predates that
// commit). Nothing of this attempt stands; run retries an owned
// transaction, and a caller's transaction must be rolled back.
var errLineageRace = errors.New("replay: a concurrent replay of the request committed its lineage first")

// isUniqueViolation reports a unique violation: only the lineage's can
// arise in the insert (its job id is fresh).
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// decide turns an attempt's results into the outcome, or asks for another
// attempt. It checks the invariants the statements' guards promise.
func decide(ctx context.Context, s *txn.Session, req Request, a *attempt) (out Outcome, retry bool, err error) {
	if !a.lookup.Row() { // the statement always returns one row
		return nil, false, errs.Invariant("lineage lookup returned no row")
	}
	l := a.lookup.Val
	switch {
	case !txn.IsReadCommitted(l.Isolation) && s.Owned():
		return nil, false, errs.Invariantf("owned replay transaction runs at %s, not READ COMMITTED", l.Isolation)
	case !txn.IsReadCommitted(l.Isolation):
		if a.lock.Row() || a.again.Row() || a.insert.Row() {
			return nil, false, errs.Invariant("replay statements ran under a refused isolation level")
		}
		return nil, false, txn.CheckIsolation(l.Isolation, txOperation, errs.ReplayUnsupportedIsolation)
	}
	found, err := lineageOf(l)
	if err != nil {
		return nil, false, err
	}
	if found != nil {
		// Lineage committed before the lookup's snapshot is seen by every
		// later statement: none may lock the source or insert.
		if a.lock.Row() || a.insert.Row() {
			return nil, false, errs.Invariant("replay statements locked or inserted after a lineage hit")
		}
		out, err := existingOutcome(req, *found)
		return out, false, err
	}
	if a.insert.Row() {
		if a.again.Row() {
			return nil, false, errs.Invariant("replay inserted although the second lookup found lineage")
		}
		out, err := inserted(s, req, a)
		return out, false, err
	}
	if a.again.Row() {
		// A concurrent replay of the request committed its lineage after
		// the first lookup: while this attempt waited for the source, or
		// before its locking read.
		v := a.again.Val
		out, err := existingOutcome(req, lineage{replayJobID: v.ReplayJobID, reason: v.Reason, status: v.ReplayStatus, runNumber: v.ReplayRunNumber})
		return out, false, err
	}
	if a.lock.Row() {
		// Locked, no lineage, and the insert wrote nothing: the definition
		// is missing or disabled, or a workflow step took the source since
		// the lock (a step's foreign key does not wait for it).
		actual, err := reclassify(ctx, s, req)
		if err != nil {
			return nil, false, err
		}
		if actual != nil && actual.WorkflowManaged {
			return nil, false, errs.WorkflowManaged.New("workflow managed job requeue is not supported")
		}
		return nil, false, errs.DefinitionUnavailableFor(a.lock.Val.JobType)
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
	// Eligible to the classification read, but neither the locking read
	// nor the insert took it: the row changed between the statements (or
	// its definition is unavailable, which the next attempt's lock tells).
	return nil, true, nil
}

func eligible(req Request, j db.JobGetForReplayClassificationRow) bool {
	return j.Status == db.JobStatusSUCCEEDED && j.RunNumber == req.ExpectedRunNumber
}

// reclassify reads the source for classification in a statement of its
// own (unguarded); nil when there is no such job in the caller's scope.
func reclassify(ctx context.Context, s *txn.Session, req Request) (*db.JobGetForReplayClassificationRow, error) {
	row, err := queries.JobGetForReplayClassification(ctx, s.DB(), db.JobGetForReplayClassificationParams{
		OrganizationID: rows.Tenant(req.Scope), ExpectedRunNumber: req.ExpectedRunNumber, ID: req.SourceJobID,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dberr.Translate(ctx, "read successful job replay mismatch", err)
	}
	return &row, nil
}

// inserted checks the insert of an attempt that wrote the replay.
func inserted(s *txn.Session, req Request, a *attempt) (Outcome, error) {
	row := a.insert.Val
	committed := ""
	if s.Owned() {
		committed = " (the transaction committed)"
	}
	switch {
	case row.ID != a.replayID || row.SourceJobID != req.SourceJobID || row.SourceRunNumber != req.ExpectedRunNumber:
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
