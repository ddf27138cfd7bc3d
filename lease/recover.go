package lease

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// RecoveryLockKey is the PostgreSQL advisory lock (transaction-level) that
// a lease recovery holds while it runs: one recovery at a time across
// processes.
const RecoveryLockKey int64 = 0x726c_7265_636f // "rlreco"

// RecoverExpiredLeases takes back up to limit (1 to runledger.MaxLimit, else
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
	if err := validate.Limit(limit, errRecoverLimitInvalid, "lease recovery limit"); err != nil {
		return nil, err
	}
	s, err := txn.Own(ctx, pool, recoveryOperation)
	if err != nil {
		return nil, err
	}
	defer s.End(ctx)
	return recoverExpired(ctx, s, limit)
}

// RecoverExpiredLeasesTx is RecoverExpiredLeases inside the caller's
// transaction, which it never commits or rolls back; the recovered jobs
// stay locked until it ends.
func RecoverExpiredLeasesTx(ctx context.Context, tx pgx.Tx, limit int) ([]runledger.Job, error) {
	if err := validate.Limit(limit, errRecoverLimitInvalid, "lease recovery limit"); err != nil {
		return nil, err
	}
	return recoverExpired(ctx, txn.Join(tx, recoveryOperation), limit)
}

const recoveryOperation = "expired lease recovery"

// recoverExpired runs the recovery in one round trip on PostgreSQL
// ([BEGIN,] the recovery over every tenant under the advisory lock, the
// purge of released claims[, COMMIT]). On Citus, where row locks need a
// statement routed to one tenant, it takes the advisory lock (the
// coordinator's) and lists the tenants holding expired leases, oldest
// expiry first, then recovers tenant by tenant, one round trip each, for
// what the limit still allows, each tenant's events written in the next
// round trip; the last events, the purge and COMMIT close it. Oldest
// expiry first holds within a tenant, and across tenants in the order
// they are listed.
func recoverExpired(ctx context.Context, s *txn.Session, limit int) ([]runledger.Job, error) {
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	if !dist {
		b := s.Batch(ctx)
		recovered := txn.Queue(b, "recover expired job leases", func(q db.DBTX) ([]db.JobRecoverExpiredLeasesRow, error) {
			return queries.JobRecoverExpiredLeases(ctx, q, db.JobRecoverExpiredLeasesParams{
				LockKey: RecoveryLockKey, MaxJobs: int32(limit),
				BackoffBaseSeconds: BackoffBase.Seconds(), BackoffMaxSeconds: BackoffMax.Seconds(),
			})
		})
		purge(ctx, b)
		b.Commit(ctx)
		if err := b.Send(ctx); err != nil {
			return nil, err
		}
		return rows.All(recovered.Val, func(r db.JobRecoverExpiredLeasesRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
	}

	b := s.Batch(ctx)
	lock := txn.Queue(b, "take the lease recovery lock", func(q db.DBTX) (bool, error) {
		return queries.TransactionTryRecoveryLock(ctx, q, RecoveryLockKey)
	})
	tenants := txn.Queue(b, "list tenants with expired leases", func(q db.DBTX) ([]uuid.UUID, error) {
		return queries.JobListTenantsWithExpiredLeases(ctx, q, int32(limit))
	})
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	jobs := []runledger.Job{}
	// Each tenant's events go in the round trip of the next tenant's
	// recovery, the last tenant's with the purge and COMMIT.
	var events *db.JobEventFailedManyParams
	queueEvents := func(b *txn.Batch) {
		if events == nil {
			return
		}
		ev := *events
		events = nil
		txn.Queue(b, "record the recovered leases' events", func(q db.DBTX) (struct{}, error) {
			return struct{}{}, queries.JobEventFailedMany(ctx, q, ev)
		})
	}
	if lock.Val {
		for _, tenant := range tenants.Val {
			if len(jobs) >= limit {
				break
			}
			b := s.Batch(ctx)
			queueEvents(b)
			recovered := txn.Queue(b, "recover expired job leases", func(q db.DBTX) ([]db.JobRecoverExpiredLeasesTenantRow, error) {
				return queries.JobRecoverExpiredLeasesTenant(ctx, q, db.JobRecoverExpiredLeasesTenantParams{
					OrganizationID: tenant, MaxJobs: int32(limit - len(jobs)),
					BackoffBaseSeconds: BackoffBase.Seconds(), BackoffMaxSeconds: BackoffMax.Seconds(),
				})
			})
			if err := b.Send(ctx); err != nil {
				return nil, err
			}
			got, err := rows.All(recovered.Val, func(r db.JobRecoverExpiredLeasesTenantRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, got...)
			if len(recovered.Val) > 0 {
				events = recoveredEvents(tenant, recovered.Val)
			}
		}
	}
	b = s.Batch(ctx)
	if lock.Val {
		queueEvents(b)
		purge(ctx, b)
	}
	b.Commit(ctx)
	if s.Owned() || lock.Val {
		if err := b.Send(ctx); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

// recoveredEvents are the events JobRecoverExpiredLeases writes for the
// rows JobRecoverExpiredLeasesTenant returned: RETRY_SCHEDULED (with the
// retry's due time) or DEAD_LETTERED, failure kind LEASE_EXPIRED, the
// stored error code, without message or progress.
func recoveredEvents(tenant uuid.UUID, recovered []db.JobRecoverExpiredLeasesTenantRow) *db.JobEventFailedManyParams {
	ev := &db.JobEventFailedManyParams{OrganizationID: tenant}
	for _, r := range recovered {
		code := ""
		if r.LastErrorCode != nil {
			code = *r.LastErrorCode
		}
		ev.Ids = append(ev.Ids, r.ID)
		ev.RunNumbers = append(ev.RunNumbers, r.RunNumber)
		ev.Attempts = append(ev.Attempts, r.Attempt)
		ev.DeadLettered = append(ev.DeadLettered, r.Status == db.JobStatusDEADLETTERED)
		ev.Stages = append(ev.Stages, r.Stage)
		ev.ProgressDone = append(ev.ProgressDone, -1)
		ev.ProgressTotal = append(ev.ProgressTotal, -1)
		ev.FailureKinds = append(ev.FailureKinds, "LEASE_EXPIRED")
		ev.ErrorCodes = append(ev.ErrorCodes, code)
		ev.ErrorMessages = append(ev.ErrorMessages, "")
		ev.NextRunAts = append(ev.NextRunAts, r.NextRunAt)
	}
	return ev
}

// purge queues the purge of execution resource claims whose delayed
// release is due (every tenant's; on Citus every shard).
func purge(ctx context.Context, b *txn.Batch) {
	txn.Queue(b, "purge released execution resource claims", func(q db.DBTX) (int64, error) {
		return queries.JobResourceClaimDeleteReleased(ctx, q)
	})
}
