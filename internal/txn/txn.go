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

// RollbackTimeout bounds the rollback of a failed owned transaction while
// the caller's context is live.
const RollbackTimeout = 5 * time.Second

// Grace bounds the work the engine still does once the caller's context
// has ended: the cancel requests and the wait for the server's answer to
// them, then the rollback, release or close of the connection. A server
// that does not answer within it (a stalled network) costs the caller at
// most about this much past its deadline; the connection is then given
// up.
const Grace = time.Second

// cleanupTimeout is how long cleanup after an operation may take: Grace
// once ctx has ended, else RollbackTimeout.
func cleanupTimeout(ctx context.Context) time.Duration {
	if ctx.Err() != nil {
		return Grace
	}
	return RollbackTimeout
}

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

// One runs a single statement (a generated method called on the DBTX it
// is given) in a round trip of its own on s: in an owned session outside a
// transaction it commits on its own (Session.AutocommitBatch), so a reply
// lost after it was sent is an error matching
// runledger.ErrCommitUnconfirmed. It returns the statement's value,
// pgx.ErrNoRows for a :one statement without a row, or the batch's error.
func One[T any](ctx context.Context, s *Session, what string, run func(q db.DBTX) (T, error)) (T, error) {
	b := s.AutocommitBatch(ctx)
	st := Queue(b, what, run)
	if err := b.Send(ctx); err != nil {
		var zero T
		return zero, err
	}
	return st.Val, st.Err
}

// Rollback rolls tx back with a context that survives the caller's
// cancellation, bounded by RollbackTimeout (Grace once ctx has ended).
// When the connection is already
// closed (pgx closes it when a context ends mid-statement) there is nothing
// to roll back; it first waits for pgx's cleanup, which sends the server a
// cancel request, so the server-side transaction is already being aborted
// when Rollback returns. Either way tx.Rollback runs, which returns a pooled
// connection to its pool.
func Rollback(ctx context.Context, tx pgx.Tx) {
	timeout := cleanupTimeout(ctx)
	if conn := tx.Conn(); conn != nil && conn.IsClosed() {
		select {
		case <-conn.PgConn().CleanupDone():
		case <-time.After(timeout):
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// CheckCallerTx refuses a joined session's transaction unless it is READ
// COMMITTED and read-write, with a copy of refusal whose detail names what
// and the transaction's mode. It asks in a round trip of its own, with
// SHOW, which takes no snapshot and no lock: a refused transaction is
// refused at once (a SERIALIZABLE READ ONLY DEFERRABLE one does not first
// wait for a safe snapshot) and is left as it was, not aborted. An owned
// session's transaction is READ COMMITTED by construction: nil, no round
// trip.
func CheckCallerTx(ctx context.Context, s *Session, what string, refusal errs.Kind) error {
	if s.Owned() {
		return nil
	}
	b := s.Batch(ctx)
	iso := QueueShow(b, "inspect transaction isolation", func(q db.DBTX) error {
		_, err := queries.TransactionShowIsolation(ctx, q)
		return err
	})
	ro := QueueShow(b, "inspect transaction access mode", func(q db.DBTX) error {
		_, err := queries.TransactionShowReadOnly(ctx, q)
		return err
	})
	if err := b.Send(ctx); err != nil {
		return err
	}
	if ro.Val == "on" {
		return refusal.Newf("%s requires a read-write READ COMMITTED transaction; got a read-only %s one", what, iso.Val)
	}
	return CheckIsolation(iso.Val, what, refusal)
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
