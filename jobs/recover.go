package jobs

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
)

// RecoveryLockKey is the PostgreSQL advisory lock (transaction-level) that
// a lease recovery holds while it runs: one recovery at a time across
// processes.
const RecoveryLockKey int64 = 0x726c_7265_636f // "rlreco"

// RecoverExpiredLeases takes back up to limit (1 to MaxLimit, else
// job.recover_limit_invalid) leases that expired by the database clock,
// oldest expiry first, in a READ COMMITTED transaction of its own, and
// returns the recovered jobs as stored after. Only one recovery runs at a
// time across processes: while another transaction holds RecoveryLockKey
// it recovers nothing (an empty result), without waiting. Each expired
// attempt counts as spent and records failure kind LEASE_EXPIRED and
// last_error_code job.lease_expired: a job with attempts left returns to
// PENDING (stage scheduled, worker cleared), due after Backoff(attempt),
// with a RETRY_SCHEDULED event; one without is DEAD_LETTERED with a
// DEAD_LETTERED event. Their execution resource claims are released, and
// claims whose delayed release (from a cancel during a live lease) is due
// are purged. Expired leases another transaction holds are skipped (SKIP
// LOCKED). A worker still running a recovered job has its next heartbeat,
// Complete or Fail refused (runledger.CodeLeaseMismatch); those were
// already refused once the lease expired.
func RecoverExpiredLeases(ctx context.Context, pool *pgxpool.Pool, limit int) ([]runledger.Job, error) {
	if err := validateLimit(limit, errRecoverLimitInvalid, "lease recovery limit"); err != nil {
		return nil, err
	}
	return txn.ReadCommitted(ctx, pool, "expired lease recovery", func(q db.DBTX) ([]runledger.Job, error) {
		return recoverExpired(ctx, q, limit)
	})
}

// RecoverExpiredLeasesTx is RecoverExpiredLeases inside the caller's
// transaction, which it never commits or rolls back; the recovered jobs
// stay locked until it ends.
func RecoverExpiredLeasesTx(ctx context.Context, tx pgx.Tx, limit int) ([]runledger.Job, error) {
	if err := validateLimit(limit, errRecoverLimitInvalid, "lease recovery limit"); err != nil {
		return nil, err
	}
	return recoverExpired(ctx, tx, limit)
}

func recoverExpired(ctx context.Context, tx db.DBTX, limit int) ([]runledger.Job, error) {
	recovered, err := queries.JobRecoverExpiredLeases(ctx, tx, db.JobRecoverExpiredLeasesParams{
		LockKey: RecoveryLockKey, MaxJobs: int32(limit),
		BackoffBaseSeconds: BackoffBase.Seconds(), BackoffMaxSeconds: BackoffMax.Seconds(),
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "recover expired job leases", err)
	}
	if _, err := queries.JobResourceClaimDeleteReleased(ctx, tx); err != nil {
		return nil, dberr.Translate(ctx, "purge released execution resource claims", err)
	}
	return rows.All(recovered, func(r db.JobRecoverExpiredLeasesRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
}
