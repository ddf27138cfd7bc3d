package jobs

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
)

// ClaimRequest asks to lease due jobs to a worker.
type ClaimRequest struct {
	// WorkerID names the worker; completion and failure must repeat it.
	WorkerID string
	// JobTypes restricts the claim to these types; empty means every type.
	JobTypes []string
	// Limit is the most jobs to lease, 1 to MaxLimit.
	Limit int
	// Lease is how long the worker holds each job before RecoverExpiredLeases
	// may take it back: at least one microsecond (PostgreSQL's precision).
	// The command line defaults it to 30s.
	Lease time.Duration
}

// Validate checks the request without touching the database: worker id
// (job.worker_id_blank, job.worker_id_invalid), each job type filter
// (job.job_type_blank, job.job_type_invalid), limit
// (job.claim_limit_invalid) and lease (job.lease_duration_invalid).
func (r ClaimRequest) Validate() error {
	if err := validateWorkerID(r.WorkerID); err != nil {
		return err
	}
	for _, t := range r.JobTypes {
		if err := validateJobType(t); err != nil {
			return err
		}
	}
	if err := validateLimit(r.Limit, errClaimLimitInvalid, "claim limit"); err != nil {
		return err
	}
	if r.Lease < time.Microsecond {
		return invalid(errLeaseDurationInvalid, "lease must be at least 1µs, got %s", r.Lease)
	}
	return nil
}

// Claim leases up to req.Limit due PENDING jobs to req.WorkerID in one READ
// COMMITTED transaction of its own and returns them in claim order:
// priority high to low, then due time (next_run_at), then age. Each leased
// job is LEASED, stage running, at attempt + 1, with lease_expires_at =
// now + req.Lease, and has one LEASED event.
//
// Candidates are locked FOR UPDATE SKIP LOCKED: jobs another transaction
// holds are passed by, never waited on, and concurrent claimers never lease
// the same job. A job with an execution resource key is leased only if it
// takes the key's claim (one lease per key; a holder that is leased, or
// canceled with its lease still running, keeps it), so fewer than Limit
// jobs may come back although more are due. No due job gives an empty,
// non-nil slice. A failed COMMIT matches runledger.ErrCommitUnconfirmed:
// the jobs may be leased with nobody working on them until their leases
// expire and RecoverExpiredLeases takes them back.
func Claim(ctx context.Context, pool *pgxpool.Pool, req ClaimRequest) ([]runledger.Job, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return txn.ReadCommitted(ctx, pool, "job claim", func(q db.DBTX) ([]runledger.Job, error) {
		return claim(ctx, q, req)
	})
}

// ClaimTx is Claim inside the caller's transaction, which it never commits
// or rolls back; the leases take effect for other workers only when it
// commits. Use READ COMMITTED: under REPEATABLE READ or SERIALIZABLE a
// candidate or resource claim changed by a concurrent committed
// transaction fails the claim with a Transient serialization error instead
// of being passed by.
func ClaimTx(ctx context.Context, tx pgx.Tx, req ClaimRequest) ([]runledger.Job, error) {
	return validated(ctx, tx, req, claim)
}

func claim(ctx context.Context, tx db.DBTX, req ClaimRequest) ([]runledger.Job, error) {
	types := req.JobTypes
	if types == nil {
		types = []string{} // NULL would match nothing.
	}
	candidates, err := queries.JobLockForClaim(ctx, tx, db.JobLockForClaimParams{
		JobTypes: types,
		MaxJobs:  int32(req.Limit),
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "select job claim candidates", err)
	}
	if len(candidates) == 0 {
		return []runledger.Job{}, nil
	}
	workerID := req.WorkerID
	leaseSeconds := req.Lease.Seconds()

	acquired, err := acquireResources(ctx, tx, candidates, workerID, leaseSeconds)
	if err != nil {
		return nil, err
	}
	ids := make([]uuid.UUID, 0, len(candidates))
	for _, c := range candidates {
		if c.ExecutionResourceKey == nil || acquired[c.ID] {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) == 0 {
		return []runledger.Job{}, nil
	}

	leased, err := queries.JobLease(ctx, tx, db.JobLeaseParams{
		WorkerID:     &workerID,
		LeaseSeconds: leaseSeconds,
		JobIds:       ids,
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "lease claimed jobs", err)
	}
	if len(leased) != len(ids) {
		// The candidates are locked PENDING rows of this transaction; all
		// of them must lease.
		return nil, errs.Invariantf("leased %d of %d locked claim candidates", len(leased), len(ids))
	}
	return rows.All(leased, func(r db.JobLeaseRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
}

// acquireResources takes the execution resource claims of the candidates
// that carry a key (one per key, the first in claim order) and reports
// which got theirs. A key held by a live claim stays with its holder; the
// statement waits for an uncommitted competitor for the same key first.
func acquireResources(ctx context.Context, tx db.DBTX, candidates []db.JobLockForClaimRow, workerID string, leaseSeconds float64) (map[uuid.UUID]bool, error) {
	var keyed []uuid.UUID
	for _, c := range candidates {
		if c.ExecutionResourceKey != nil {
			keyed = append(keyed, c.ID)
		}
	}
	if len(keyed) == 0 {
		return nil, nil
	}
	got, err := queries.JobResourceClaimAcquire(ctx, tx, db.JobResourceClaimAcquireParams{
		WorkerID:     workerID,
		LeaseSeconds: leaseSeconds,
		JobIds:       keyed,
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "acquire execution resource claims", err)
	}
	acquired := make(map[uuid.UUID]bool, len(got))
	for _, id := range got {
		acquired[id] = true
	}
	return acquired, nil
}
