// Package txn is the transaction engine of replay and jobs: a Session sends
// an operation's generated statements in pipelined batches, with BEGIN
// riding the first and COMMIT the last in a transaction the library owns,
// and neither inside a caller's transaction. Rollback, the release of a
// dirty connection, commit-unconfirmed detection, the cancel of a
// statement waiting on a lock, and the failpoints between statements live
// here once. It also checks the isolation of callers' transactions.
package txn

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
)

// Failpoints of owned sessions, each fired with a FailpointCall. Where
// BEGIN or COMMIT shares a batch with other statements, the batch is split
// at the point only while a test enables it (Batch.Point).
const (
	// FailpointAfterBegin: BEGIN's result is in; the operation's
	// statements are next.
	FailpointAfterBegin = "txn/after-begin"
	// FailpointBeforeCommit: the statements before COMMIT have their
	// results; COMMIT is next.
	FailpointBeforeCommit = "txn/before-commit"
)

func init() { failpoint.Declare(FailpointAfterBegin, FailpointBeforeCommit) }

// FailpointCall identifies an owned transaction at a failpoint by its
// operation name ("successful job replay", "job enqueue", ...).
type FailpointCall struct {
	Op string
}

// RollbackTimeout bounds the rollback of a failed owned transaction; it runs
// even when the caller's context is already done.
const RollbackTimeout = 5 * time.Second

// ReadCommitted runs fn in a new READ COMMITTED transaction of an owned
// Session, for operations whose statements depend on each other's results
// in Go (fn runs them one by one on q): BEGIN and COMMIT each cost a round
// trip of their own. It commits when fn returns nil and rolls back
// otherwise, returning fn's error. A failed COMMIT returns an error matching
// runledger.ErrCommitUnconfirmed: the outcome is unknown.
func ReadCommitted[T any](ctx context.Context, pool *pgxpool.Pool, op string, fn func(q db.DBTX) (T, error)) (T, error) {
	var zero T
	s, err := Own(ctx, pool, op)
	if err != nil {
		return zero, err
	}
	defer s.End(ctx)
	if err := s.Batch(ctx).Send(ctx); err != nil {
		return zero, err
	}
	out, err := fn(s.DB())
	if err != nil {
		return zero, err
	}
	b := s.Batch(ctx)
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return zero, err
	}
	return out, nil
}

// Rollback rolls tx back with a context that survives the caller's
// cancellation, bounded by RollbackTimeout. When the connection is already
// closed (pgx closes it when a context ends mid-statement) there is nothing
// to roll back; it first waits for pgx's cleanup, which sends the server a
// cancel request, so the server-side transaction is already being aborted
// when Rollback returns. Either way tx.Rollback runs, which returns a pooled
// connection to its pool.
func Rollback(ctx context.Context, tx pgx.Tx) {
	if conn := tx.Conn(); conn != nil && conn.IsClosed() {
		select {
		case <-conn.PgConn().CleanupDone():
		case <-time.After(RollbackTimeout):
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// IsReadCommitted reports whether a transaction isolation level, as
// PostgreSQL spells it in transaction_isolation, behaves as READ COMMITTED:
// "read committed", or "read uncommitted", which PostgreSQL runs as read
// committed. Case does not matter.
func IsReadCommitted(level string) bool {
	switch strings.ToLower(strings.TrimSpace(level)) {
	case "read committed", "read uncommitted":
		return true
	}
	return false
}

// CheckIsolation returns nil when level behaves as READ COMMITTED, and
// otherwise a copy of refusal whose detail names what and the level.
func CheckIsolation(level, what string, refusal errs.Kind) error {
	if IsReadCommitted(level) {
		return nil
	}
	return refusal.Newf("%s requires READ COMMITTED isolation; got %s", what, level)
}
