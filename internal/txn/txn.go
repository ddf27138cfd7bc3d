// Package txn runs operations in transactions the library owns, and checks
// the isolation of transactions callers own. Both replay and jobs use it,
// so every owned operation commits, rolls back and reports failures the
// same way.
package txn

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
)

// Failpoints of owned transactions (ReadCommitted, and replay.SucceededJob,
// which runs its transaction by hand). Each receives a FailpointCall.
const (
	// FailpointAfterBegin: the transaction has begun; the operation is
	// next. In replay.SucceededJob BEGIN travels with the first lookup, and
	// this point fires once that batch has returned.
	FailpointAfterBegin = "txn/after-begin"
	// FailpointBeforeCommit: the operation succeeded; COMMIT is next. In
	// replay.SucceededJob's insert path COMMIT travels with the insert, and
	// this point fires just before that batch is sent.
	FailpointBeforeCommit = "txn/before-commit"
)

func init() { failpoint.Declare(FailpointAfterBegin, FailpointBeforeCommit) }

// FailpointCall identifies an owned transaction at a failpoint by its
// operation name ("successful job replay", "job enqueue", ...).
type FailpointCall struct {
	Op string
}

// Beginner starts transactions; *pgxpool.Pool, *pgx.Conn and pgx.Tx (a
// savepoint) satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// RollbackTimeout bounds the rollback of a failed owned transaction; it runs
// even when the caller's context is already done.
const RollbackTimeout = 5 * time.Second

// ReadCommitted runs fn in a new READ COMMITTED transaction (set explicitly,
// overriding any session default) named op in error details. It commits
// when fn returns nil and rolls back otherwise, returning fn's error; a
// failed rollback is not reported (the connection is discarded by pgx and
// the server rolls back). A failed COMMIT returns an error matching
// runledger.ErrCommitUnconfirmed: the outcome is unknown.
func ReadCommitted[T any](ctx context.Context, b Beginner, op string, fn func(pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return zero, dberr.Translate(ctx, "begin "+op+" transaction", err)
	}
	failpoint.Inject(ctx, FailpointAfterBegin, FailpointCall{Op: op})
	out, err := fn(tx)
	if err != nil {
		Rollback(ctx, tx)
		return zero, err
	}
	failpoint.Inject(ctx, FailpointBeforeCommit, FailpointCall{Op: op})
	if err := tx.Commit(ctx); err != nil {
		return zero, dberr.CommitUnconfirmed("commit "+op+" transaction", err)
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

// RequireReadCommitted reads the isolation of the caller's transaction and
// returns a copy of refusal, with the level in its detail, unless it
// behaves as READ COMMITTED.
func RequireReadCommitted(ctx context.Context, tx pgx.Tx, what string, refusal errs.Kind) error {
	level, err := db.New().TransactionGetIsolation(ctx, tx)
	if err != nil {
		return dberr.Translate(ctx, "inspect transaction isolation", err)
	}
	return CheckIsolation(level, what, refusal)
}

// CheckIsolation returns nil when level behaves as READ COMMITTED, and
// otherwise a copy of refusal whose detail names what and the level.
func CheckIsolation(level, what string, refusal errs.Kind) error {
	if IsReadCommitted(level) {
		return nil
	}
	return refusal.Newf("%s requires READ COMMITTED isolation; got %s", what, level)
}
