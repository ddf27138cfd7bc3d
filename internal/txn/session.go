package txn

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
)

// Conn is what a Session sends statements on: a pooled connection (an
// owned session) or the caller's pgx.Tx (a joined session).
type Conn interface {
	db.DBTX
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Conn() *pgx.Conn
}

// Session runs one operation's statements on one connection, in batches
// of generated statements that each cost one round trip.
//
// An owned session (Own) runs its own READ COMMITTED transaction: BEGIN
// rides the first batch and COMMIT the batch marked with Commit, so a
// one-batch operation is one round trip, BEGIN to COMMIT. A joined session
// (Join) runs in the caller's transaction and sends neither. End releases
// an owned session's connection, rolling back first when the transaction
// did not commit.
type Session struct {
	conn   Conn
	pooled *pgxpool.Conn
	op     string
	// open: an owned session sent BEGIN and no COMMIT has succeeded since
	// (a batch after a commit begins a new transaction); committed: the
	// last COMMIT succeeded.
	open, committed bool
	// discard: the connection may carry a stray cancel request or an
	// unknown state; an owned session closes it instead of reusing it.
	discard bool
	// graceUntil: once the caller's context ended mid-batch, the end of
	// the Grace that the cancel and the cleanup after it share.
	graceUntil time.Time
}

// cleanupTimeout is how long End may take: what is left of the Grace
// that began when ctx ended during a batch, a whole Grace when ctx ended
// otherwise, and RollbackTimeout while ctx is live.
func (s *Session) cleanupTimeout(ctx context.Context) time.Duration {
	if !s.graceUntil.IsZero() {
		return max(time.Until(s.graceUntil), 10*time.Millisecond)
	}
	return cleanupTimeout(ctx)
}

// Own acquires a connection from pool for an operation named op (in error
// details) that runs its own transaction. Call End when done.
func Own(ctx context.Context, pool *pgxpool.Pool, op string) (*Session, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, dberr.Translate(ctx, "begin "+op+" transaction", err)
	}
	return &Session{conn: c, pooled: c, op: op}, nil
}

// Join runs an operation named op in the caller's transaction, which the
// session never commits or rolls back.
func Join(tx pgx.Tx, op string) *Session { return &Session{conn: tx, op: op} }

// Owned reports whether the session runs its own transaction.
func (s *Session) Owned() bool { return s.pooled != nil }

// Committed reports whether an owned session's COMMIT succeeded.
func (s *Session) Committed() bool { return s.committed }

// Op is the operation's name.
func (s *Session) Op() string { return s.op }

// DB runs single statements on the session's connection, outside any
// batch (with the same argument and row conversions as a batch).
func (s *Session) DB() db.DBTX { return uuidConn{s.conn} }

// End finishes an owned session: a transaction that did not commit is
// rolled back (with a context that survives the caller's cancellation,
// bounded by RollbackTimeout, or by Grace once ctx has ended) and the
// connection goes back to the pool, or is closed when its state is
// unknown. A joined session has nothing to end. End may be called more
// than once.
func (s *Session) End(ctx context.Context) {
	if s.pooled == nil {
		return
	}
	c := s.pooled
	s.pooled = nil
	pc := c.Conn().PgConn()
	timeout := s.cleanupTimeout(ctx)
	switch {
	case pc.IsClosed():
		// pgx closed it mid-statement; wait (briefly) for its cleanup so
		// that the server has seen the connection go.
		select {
		case <-pc.CleanupDone():
		case <-time.After(timeout):
		}
	case s.discard:
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		_ = c.Conn().Close(cctx) // the server rolls back what is open
		cancel()
	case s.open && pc.TxStatus() != 'I' && !pc.IsBusy():
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		if err := queries.TransactionRollback(rctx, c); err != nil {
			// A rollback that failed leaves the connection's state
			// unknown: close it rather than reuse it.
			_ = c.Conn().Close(rctx)
		}
		cancel()
	}
	// The pool destroys a connection that is closed, busy or still in a
	// transaction rather than reusing it.
	c.Release()
}

// Rollback ends an owned session's failed or open transaction so that the
// next Batch begins a new one on the same connection (a retry). A joined
// session's transaction is the caller's: Rollback does nothing there. When
// the rollback fails the connection is given up and the error returned.
func (s *Session) Rollback(ctx context.Context) error {
	if s.pooled == nil || !s.open {
		return nil
	}
	s.open = false
	if err := queries.TransactionRollback(ctx, s.pooled); err != nil {
		s.discard = true
		return dberr.Translate(ctx, "roll back "+s.op+" transaction", err)
	}
	return nil
}

var queries = db.New()
