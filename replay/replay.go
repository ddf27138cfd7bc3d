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
//
// Round trips: the statements of the protocol are sent in
// pgx batches (pipelines) so that a replay costs three round trips to the
// server instead of nine: [BEGIN READ COMMITTED + lineage lookup], [source
// lock + second lookup + classification read], [insert + COMMIT]. An
// idempotent retry costs two ([BEGIN + lookup], [COMMIT]); a mismatch or
// NotFound three. In a caller's transaction the isolation check rides on
// the first lookup. See docs/PERFORMANCE.md.
//
// List and Origin read the lineage this package writes: the replays made
// from a job, and the job a replay was made from.
package replay

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// MaxSourceLockAttempts bounds the source lock loop. The loop repeats only
// when the locking read found nothing but the unlocked read a moment later
// saw an eligible source (the row changed between the two statements); it
// converges at once in practice. Past the bound the operation fails with
// job.replay_source_unstable rather than report a mismatch whose actual
// state equals the expectation.
const MaxSourceLockAttempts = 4

const (
	ownedOperation = "successful job replay"
	txOperation    = "successful job compare-and-replay"
)

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
//
// The transaction runs on a connection acquired from pool, with BEGIN sent
// in one batch with the first lookup and COMMIT in one batch with the
// insert (see the package doc). A statement error in that last batch
// stops it before COMMIT, so the transaction is rolled back and the
// statement's error returned; if the connection fails while that batch is
// in flight without the server having reported an error for the insert,
// the COMMIT may have run and the error matches ErrCommitUnconfirmed. A
// connection left in a transaction is rolled back, or destroyed by the
// pool, before it is released.
func SucceededJob(ctx context.Context, pool *pgxpool.Pool, req Request) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, dberr.Translate(ctx, "begin "+ownedOperation+" transaction", err)
	}
	s := &session{c: c, owned: true}
	out, err := run(ctx, s, req)
	if err != nil {
		abandon(ctx, c)
		return nil, err
	}
	if !s.committed {
		failpoint.Inject(ctx, txn.FailpointBeforeCommit, txn.FailpointCall{Op: ownedOperation})
		if err := commit(ctx, c); err != nil {
			abandon(ctx, c)
			return nil, err
		}
	}
	c.Release()
	return out, nil
}

// SucceededJobTx replays a succeeded job inside the caller's transaction,
// which it never commits or rolls back.
//
// It validates the request, then refuses any isolation level but READ
// COMMITTED (errs.ReplayUnsupportedIsolation), since the protocol
// relies on each statement seeing what concurrent replays committed; the
// refusal reads and locks nothing (the isolation probe and the first
// lineage lookup are one statement, which looks for lineage only under
// READ COMMITTED). Locks it takes last until the caller's transaction ends:
// after an Existing outcome workers skip the replay job, and after a
// conflict found once the source was locked the source stays locked. On an
// error the caller should roll back.
func SucceededJobTx(ctx context.Context, tx pgx.Tx, req Request) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return run(ctx, &session{c: tx}, req)
}

var queries = db.New()

// session is one run of the operation on a connection.
type session struct {
	c conn
	// owned: c is a pooled connection and the operation runs its
	// transaction by hand (SucceededJob); otherwise c is the caller's
	// transaction.
	owned bool
	// committed: the insert's batch carried COMMIT, and it succeeded.
	committed bool
}

// run is the body shared by both entry points.
func run(ctx context.Context, s *session, req Request) (Outcome, error) {
	// 1. Lineage first: an idempotent retry ends here, whatever the source's
	// state is now, holding only the replay row lock.
	found, err := s.findExisting(ctx, req)
	if err != nil {
		return nil, err
	}
	if found != nil {
		return existingOutcome(req, *found)
	}
	failpoint.Inject(ctx, fpAfterLookup, call(req, 0))
	// 2. Lock the source while it is eligible, or classify why it is not;
	// 3. in the same round trip, once it is locked, look up the lineage
	// again: a concurrent identical request may have committed its replay
	// while this one waited for the lock.
	source, out, err := lockSource(ctx, s, req)
	if out != nil || err != nil {
		return out, err
	}
	failpoint.Inject(ctx, fpAfterSourceLock, call(req, 0))
	// 4. Create the replay, its event and the lineage in one statement.
	return insertReplay(ctx, s, req, source)
}

// lineage is a lineage row of the request as a lookup returns it: the
// replay's status and run are set when the stored reason matched (and the
// replay row was then locked).
type lineage struct {
	replayJobID uuid.UUID
	reason      string
	status      *db.JobStatus
	runNumber   *int32
}

// findExisting runs the first lineage lookup, with the isolation probe, in
// the first round trip: owned, in one batch behind BEGIN READ COMMITTED;
// in a caller's transaction, alone, refusing an isolation level other than
// READ COMMITTED (under which the statement has read and locked nothing).
// It returns nil when there is no lineage.
func (s *session) findExisting(ctx context.Context, req Request) (*lineage, error) {
	params := db.JobReplayGetForRequestParams{
		SourceJobID:      req.SourceJobID,
		SourceRunNumber:  req.ExpectedRunNumber,
		ReplayRequestKey: req.Key,
		OrganizationID:   req.Scope.OrganizationIDPtr(),
		Reason:           req.Reason,
	}
	if s.owned {
		var p pipeline
		begin := queue(&p, func(q db.DBTX) (struct{}, error) {
			return struct{}{}, queries.TransactionBeginReadCommitted(ctx, q)
		})
		lookup := queue(&p, func(q db.DBTX) (db.JobReplayGetForRequestRow, error) {
			return queries.JobReplayGetForRequest(ctx, q, params)
		})
		batchErr := p.send(ctx, s.c)
		switch i, err := firstError(batchErr, begin.err, lookup.err); i {
		case -1:
		case 0:
			return nil, dberr.Translate(ctx, "begin "+ownedOperation+" transaction", err)
		default:
			return nil, dberr.Translate(ctx, "load existing job replay", err)
		}
		if lookup.err != nil { // no row: the statement always returns one
			return nil, errs.Invariant("lineage lookup returned no row")
		}
		failpoint.Inject(ctx, txn.FailpointAfterBegin, txn.FailpointCall{Op: ownedOperation})
		if !txn.IsReadCommitted(lookup.val.Isolation) {
			return nil, errs.Invariantf("owned replay transaction runs at %s, not READ COMMITTED", lookup.val.Isolation)
		}
		return lineageOf(lookup.val)
	}
	row, err := queries.JobReplayGetForRequest(ctx, uuidConn{s.c}, params)
	if err != nil {
		return nil, dberr.Translate(ctx, "inspect transaction isolation and load existing job replay", err)
	}
	if err := txn.CheckIsolation(row.Isolation, txOperation, errs.ReplayUnsupportedIsolation); err != nil {
		return nil, err
	}
	return lineageOf(row)
}

func lineageOf(row db.JobReplayGetForRequestRow) (*lineage, error) {
	if row.ReplayJobID == nil {
		if row.Reason != nil || row.ReplayStatus != nil || row.ReplayRunNumber != nil {
			return nil, errs.Invariant("lineage lookup returned replay columns without a lineage row")
		}
		return nil, nil
	}
	if row.Reason == nil {
		return nil, errs.Invariant("lineage lookup returned a lineage row without its reason")
	}
	return &lineage{replayJobID: *row.ReplayJobID, reason: *row.Reason, status: row.ReplayStatus, runNumber: row.ReplayRunNumber}, nil
}

// existingOutcome classifies a lineage row found for the request: Replayed
// (Existing) when the stored reason matches, the conflict error, with
// nothing locked by the lookup, when it does not.
func existingOutcome(req Request, found lineage) (Outcome, error) {
	if found.reason != req.Reason {
		return nil, errs.ReplayIdempotencyConflict.New(
			"job replay request reused its key with different request metadata")
	}
	if found.status == nil || found.runNumber == nil {
		// The lineage row exists but its replay job could not be read: it was
		// deleted after this statement's snapshot was taken.
		return nil, errReplayMissingExisting.New("job replay lineage referenced an existing replay job that could not be loaded")
	}
	status, err := rows.Status(*found.status)
	if err != nil {
		return nil, err
	}
	return Replayed{
		SourceJobID:     req.SourceJobID,
		SourceRunNumber: req.ExpectedRunNumber,
		Disposition:     runledger.DispositionExisting,
		Replay:          Job{JobID: found.replayJobID, Status: status, RunNumber: *found.runNumber},
	}, nil
}

// insertReplay creates the replay of the locked source: in a caller's
// transaction one statement; owned, that statement and COMMIT in one
// batch.
func insertReplay(ctx context.Context, s *session, req Request, source db.JobLockForReplayRow) (Outcome, error) {
	if key := source.ExecutionResourceKey; key != nil {
		if err := validate.ExecutionResourceKey(*key); err != nil {
			return nil, err
		}
	}
	replayID, err := uuid.NewV7()
	if err != nil {
		return nil, errs.JobIDFailed.New("generate replay job id: " + err.Error())
	}
	params := db.JobReplayInsertParams{
		SourceJobID:      source.ID,
		ReplayJobID:      replayID,
		ReplayRequestKey: req.Key,
		Reason:           req.Reason,
	}
	var row db.JobReplayInsertRow
	if s.owned {
		row, err = s.insertAndCommit(ctx, req, params)
	} else {
		row, err = queries.JobReplayInsert(ctx, uuidConn{s.c}, params)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			err = dberr.Translate(ctx, "record successful job replay", err)
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// Nothing was written (the statement inserts only through the
		// definition it found).
		return nil, errs.DefinitionUnavailableFor(source.JobType)
	}
	if err != nil {
		return nil, err
	}
	if !s.owned {
		failpoint.Inject(ctx, fpAfterInsert, call(req, 0))
	}
	committed := ""
	if s.owned {
		committed = " (the transaction committed)"
	}
	switch {
	case row.ID != replayID || row.SourceJobID != source.ID || row.SourceRunNumber != source.RunNumber:
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
