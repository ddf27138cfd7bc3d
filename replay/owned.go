package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/txn"
)

// The transaction of SucceededJob is run by hand on a pooled connection,
// so that BEGIN and COMMIT can share round trips with the operation's
// statements: BEGIN is the first statement of the first batch
// (session.findExisting), COMMIT the last of the insert's batch
// (insertAndCommit) or, for the other outcomes, a round trip of its own
// (commit). Any error ends in abandon, which rolls back and releases.

// insertAndCommit sends the replay insert and COMMIT in one batch.
//
// The failpoints between the two, fpAfterInsert and
// txn.FailpointBeforeCommit, fire just before the batch is sent: there is
// no moment in between at which the client could act.
//
// Telling the insert's failure from the COMMIT's: the server runs the
// batch in order and an error skips the rest, so an error the server
// reports for the insert (a constraint, a lock timeout, a terminated
// backend) means COMMIT never ran: the transaction is rolled back by
// abandon and the classified error returned. So does an error pgx raises
// before sending anything (a context already done). Any other failure
// while the batch is in flight (the connection lost, the context ended
// mid-wait) leaves the COMMIT's fate unknown: ErrCommitUnconfirmed. Once
// the insert's result arrived, a failure of the COMMIT is
// ErrCommitUnconfirmed too.
//
// An insert that returns no row (the job type's definition is missing or
// disabled) wrote nothing; the COMMIT behind it then ends a transaction
// that holds no writes, and pgx.ErrNoRows is returned for the caller to
// report.
func (s *session) insertAndCommit(ctx context.Context, req Request, params db.JobReplayInsertParams) (db.JobReplayInsertRow, error) {
	failpoint.Inject(ctx, fpAfterInsert, call(req, 0))
	failpoint.Inject(ctx, txn.FailpointBeforeCommit, txn.FailpointCall{Op: ownedOperation})
	var p pipeline
	insert := queue(&p, func(q db.DBTX) (db.JobReplayInsertRow, error) {
		return queries.JobReplayInsert(ctx, q, params)
	})
	commit := queue(&p, func(q db.DBTX) (pgconn.CommandTag, error) {
		return queries.TransactionCommit(ctx, q)
	})
	batchErr := p.send(ctx, s.c)

	row, insertErr := insert.val, insert.err
	if insertErr == errNotReached {
		insertErr = batchErr // nothing was read: the batch's own failure
	}
	switch {
	case insertErr == nil || errors.Is(insertErr, pgx.ErrNoRows):
		// The insert ran; COMMIT came next.
		if commit.err != nil || commit.val.String() != "COMMIT" {
			if errors.Is(insertErr, pgx.ErrNoRows) {
				// Nothing was written, whatever became of the COMMIT.
				return row, insertErr
			}
			commitErr := commit.err
			if commitErr == errNotReached {
				commitErr = batchErr
			}
			return row, commitFailure(commitErr, commit.val)
		}
		s.committed = true
		return row, insertErr
	case serverReported(insertErr) || pgconn.SafeToRetry(insertErr):
		return row, dberr.Translate(ctx, "record successful job replay", insertErr)
	default:
		return row, dberr.CommitUnconfirmed("commit "+ownedOperation+" transaction", insertErr)
	}
}

// serverReported reports an error the server sent for the statement.
func serverReported(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// commit commits in a round trip of its own (every outcome but Inserted).
func commit(ctx context.Context, c *pgxpool.Conn) error {
	tag, err := queries.TransactionCommit(ctx, c)
	if err != nil && pgconn.SafeToRetry(err) {
		// Nothing was sent (the context was already done): not a COMMIT
		// that failed; abandon rolls back.
		return dberr.Translate(ctx, "commit "+ownedOperation+" transaction", err)
	}
	if err != nil || tag.String() != "COMMIT" {
		return commitFailure(err, tag)
	}
	return nil
}

func commitFailure(err error, tag pgconn.CommandTag) error {
	if err == nil {
		err = fmt.Errorf("COMMIT answered %q: the transaction had failed", tag.String())
	}
	return dberr.CommitUnconfirmed("commit "+ownedOperation+" transaction", err)
}

// abandon ends the connection's part in a failed call: it rolls back a
// transaction left open, with a context that survives the caller's
// cancellation (bounded by txn.RollbackTimeout), and releases the
// connection. When pgx has closed the connection (a context ended
// mid-statement) it first waits for pgx's cleanup, which sends the server
// a cancel request. A connection that is closed, busy or still in a
// transaction after that is destroyed by the pool on release rather than
// reused (pgxpool.Conn.Release checks all three).
func abandon(ctx context.Context, c *pgxpool.Conn) {
	pc := c.Conn().PgConn()
	if pc.IsClosed() {
		select {
		case <-pc.CleanupDone():
		case <-time.After(txn.RollbackTimeout):
		}
	} else if pc.TxStatus() != 'I' && !pc.IsBusy() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txn.RollbackTimeout)
		_ = queries.TransactionRollback(rctx, c)
		cancel()
	}
	c.Release()
}
