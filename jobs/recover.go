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

// RecoverExpiredLeases takes back up to limit (1 to MaxLimit, else
// job.recover_limit_invalid) leases that expired, oldest expiry first, in a
// READ COMMITTED transaction of its own, and returns the recovered jobs as
// stored after. A job with attempts left returns to PENDING (stage queued,
// due now, worker cleared) with a RETRY_SCHEDULED event; one without is
// DEAD_LETTERED with a DEAD_LETTERED event; both record last_error_code
// job.lease_expired and failure kind LEASE_EXPIRED, and the attempt counts
// as spent. Their execution resource claims are released, and claims whose
// delayed release (from a cancel during a live lease) is due are purged.
// Expired leases another transaction holds are skipped (SKIP LOCKED), so
// concurrent recoverers never process the same job. A worker still running
// a recovered job gets runledger.CodeLeaseMismatch when it finishes.
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
	recovered, err := queries.JobRecoverExpiredLeases(ctx, tx, int32(limit))
	if err != nil {
		return nil, dberr.Translate(ctx, "recover expired job leases", err)
	}
	if _, err := queries.JobResourceClaimDeleteReleased(ctx, tx); err != nil {
		return nil, dberr.Translate(ctx, "purge released execution resource claims", err)
	}
	return rows.All(recovered, func(r db.JobRecoverExpiredLeasesRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
}
