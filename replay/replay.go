// Package replay implements compare-and-replay of a succeeded job: given a
// job that finished SUCCEEDED at a run the caller observed, it creates a
// fresh job with the same type, tenant, payload and settings, records the
// lineage and one ENQUEUED audit event, and never touches the source.
//
// It is idempotent per (source, run, request key): the same key and reason
// return the replay made the first time; the same key with another reason
// is a Conflict. Concurrent identical requests serialize on the source row
// and resolve to one replay; that needs READ COMMITTED, which both entry
// points enforce.
//
// Locks: an Existing outcome locks the replay job FOR NO KEY UPDATE until
// the transaction ends; the insert path locks the source FOR NO KEY UPDATE
// and the job type's definition FOR SHARE; a conflict found before the
// source lock and a NotFound lock nothing. A mismatch locks nothing when
// it is found at once; one found after the locking read waited for
// another transaction that then changed the source keeps the source
// locked until the transaction ends (PostgreSQL locks the row's newest
// version before it re-checks it, and keeps the lock when the re-check
// fails). SucceededJob commits at once, so that lock ends with the call;
// in SucceededJobTx it lasts until the caller's transaction ends.
//
// Round trips: every outcome costs one (BEGIN to COMMIT in SucceededJob).
// More only after an error (ROLLBACK), when the bounded lock loop tries
// again, or when the source looks workflow-managed and is read again. See
// docs/PERFORMANCE.md.
//
// Bulk is the same operation for a whole selection of sources (a list, or
// a filter on job type, scope and finish time) under one key and reason,
// in chunks of set-based statements, one transaction each; each source
// gets the verdict SucceededJob would give it, and running the same action
// again replays only what is missing. BulkCount sizes a selection.
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
	"github.com/runledger-go/runledger/internal/errs"
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

const (
	ownedOperation = "successful job replay"
	txOperation    = "successful job compare-and-replay"
)

// SucceededJob replays a succeeded job in a READ COMMITTED transaction of
// its own (whatever the session default), sent with its statements in one
// round trip. The request is validated before a connection is taken.
//
// Every outcome commits; ExpectationMismatch and NotFound wrote nothing. A
// statement error rolls back and is returned. A failed COMMIT, or a
// connection lost after the batch was sent, matches
// runledger.ErrCommitUnconfirmed: the replay may or may not exist; repeat
// the call with the same key and reason. If ctx ends while a statement
// waits for a lock, the statement is canceled on the server, the
// transaction rolls back, and the error wraps ctx's error.
func SucceededJob(ctx context.Context, pool *pgxpool.Pool, req Request) (Outcome, error) {
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

// SucceededJobTx replays a succeeded job inside the caller's transaction,
// which it never commits or rolls back.
//
// It validates the request, then sends SucceededJob's statements in one
// round trip, without BEGIN and COMMIT. It refuses any transaction but a
// read-write READ COMMITTED one (runledger.CodeReplayUnsupportedIsolation),
// since each statement must see what concurrent replays committed; the
// checks travel with the statements, so a refusal costs no round trip of
// its own:
//
//   - under REPEATABLE READ or SERIALIZABLE the statements' guards make
//     them read, lock and write nothing, and the caller's transaction goes
//     on (it has taken its snapshot);
//   - a read-only transaction refuses the first locking read (SQLSTATE
//     25006), which aborts the caller's transaction: roll it back. A
//     SERIALIZABLE READ ONLY DEFERRABLE one first waits for its safe
//     snapshot, as any statement in it would.
//
// Its locks last until the caller's transaction ends:
// after an Existing outcome workers skip the replay job, and after a
// conflict found once the source was locked the source stays locked. On an
// error the caller should roll back.
//
// When ctx ends while a statement runs, the statement is canceled on the
// server (the caller's transaction is then aborted: roll it back), and the
// error wraps ctx's error. If the server does not confirm the cancel
// within txn's grace of 1 s, the caller's connection is closed rather than
// left to receive a late cancel on its next statement.
func SucceededJobTx(ctx context.Context, tx pgx.Tx, req Request) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return run(ctx, txn.Join(tx, txOperation), req)
}

var queries = db.New()

// run is the body shared by both entry points: the bounded lock loop, one
// round trip per attempt.
func run(ctx context.Context, s *txn.Session, req Request) (Outcome, error) {
	for attempt := 1; attempt <= MaxSourceLockAttempts; attempt++ {
		a, err := sendAttempt(ctx, s, req, attempt)
		if errors.Is(err, errLineageRace) {
			if !s.Owned() {
				return nil, errs.Transient.New("a concurrent replay of the same request committed first: roll back and retry")
			}
			if err := s.Rollback(ctx); err != nil {
				return nil, err
			}
			continue // the next attempt's lookup finds that replay
		}
		if err != nil {
			return nil, err
		}
		out, retry, err := decide(ctx, s, req, a)
		if !retry {
			return out, err
		}
		// Eligible to the classification read but not when the locking
		// read ran (the row changed between the two): try again.
	}
	return nil, errs.ReplaySourceUnstable.Newf("job replay source %s stayed eligible to the unlocked read but not to the locking read after %d attempts",
		req.SourceJobID, MaxSourceLockAttempts)
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
