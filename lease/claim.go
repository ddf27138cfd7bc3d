package lease

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
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/internal/wake"
)

// ClaimRequest asks to lease due jobs to a worker.
type ClaimRequest struct {
	// WorkerID names the worker; completion and failure must repeat it.
	WorkerID string
	// JobTypes restricts the claim to these types; empty means every type.
	JobTypes []string
	// Limit is the most jobs to lease, 1 to runledger.MaxLimit.
	Limit int
	// Lease is how long the worker holds each job before RecoverExpiredLeases
	// may take it back: 1µs (PostgreSQL's precision) to MaxLease; a
	// heartbeat renews it. The command line defaults it to 30s.
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
		if err := validate.JobType(t); err != nil {
			return err
		}
	}
	if err := validate.Limit(r.Limit, errClaimLimitInvalid, "claim limit"); err != nil {
		return err
	}
	return validateLease(r.Lease)
}

// Claim leases up to req.Limit due PENDING jobs to req.WorkerID in one
// statement on a pooled connection and returns them in claim order:
// priority high to low, then due time (next_run_at), then age. Each leased
// job is LEASED, stage running, at attempt + 1, with lease_expires_at =
// now + req.Lease, and has one LEASED event. Only due jobs are read: jobs
// scheduled for later cost nothing, however many there are.
//
// Candidates are locked FOR UPDATE SKIP LOCKED: jobs another transaction
// holds are passed by, never waited on, and concurrent claimers never lease
// the same job. A job with an execution resource key is leased only if it
// takes the key's claim (one lease per key; a holder that is leased, or
// canceled with its lease still running, keeps it), so fewer than Limit
// jobs may come back although more are due. No due job gives an empty,
// non-nil slice. A lost reply matches runledger.ErrCommitUnconfirmed: the
// jobs may be leased with nobody working on them until their leases expire
// and RecoverExpiredLeases takes them back.
func Claim(ctx context.Context, pool *pgxpool.Pool, req ClaimRequest) ([]runledger.Job, error) {
	return txn.OwnedWrite(ctx, pool, "job claim", req, claim)
}

// ClaimTx is Claim inside the caller's transaction, which it never commits
// or rolls back; the leases take effect for other workers only when it
// commits. Use READ COMMITTED: under REPEATABLE READ or SERIALIZABLE a
// candidate or resource claim changed by a concurrent committed
// transaction fails the claim with a Transient serialization error instead
// of being passed by.
func ClaimTx(ctx context.Context, tx pgx.Tx, req ClaimRequest) ([]runledger.Job, error) {
	return txn.JoinedWrite(ctx, tx, "job claim", req, claim)
}

func claim(ctx context.Context, s *txn.Session, req ClaimRequest) ([]runledger.Job, error) {
	types := req.JobTypes
	if types == nil {
		types = []string{} // NULL would match nothing.
	}
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	var jobs []runledger.Job
	if dist {
		jobs, err = claimTenantByTenant(ctx, s, req, types)
	} else {
		var leased []db.JobClaimRow
		leased, err = txn.One(ctx, s, "claim jobs", func(q db.DBTX) ([]db.JobClaimRow, error) {
			return queries.JobClaim(ctx, q, db.JobClaimParams{
				JobTypes:     types,
				MaxJobs:      int32(req.Limit),
				WorkerID:     req.WorkerID,
				LeaseSeconds: req.Lease.Seconds(),
			})
		})
		if err == nil {
			jobs, err = rows.All(leased, func(r db.JobClaimRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
		}
	}
	if jobs == nil && err == nil {
		jobs = []runledger.Job{}
	}
	return jobs, err
}

// claimTenantByTenant is the claim on Citus, where a statement takes row
// locks only when it is routed to one tenant: in one transaction, the
// tenants with due jobs, most urgent first (without a lock, from every
// shard), then the routed claim of each in turn for what is still wanted,
// until the limit is reached or the tenants run out. Within a tenant the
// order is the claim order; across tenants a claim may lease a tenant's
// less urgent job before a more urgent one of the next tenant listed.
// Each tenant's claim is statements Citus runs in one step on the tenant's
// shard (JobClaimTenant; then, only for candidates with an execution
// resource key, JobClaimTenantTakeClaims and JobClaimTenantKeyed in one
// round trip), and the LEASED events of every
// tenant are written with the COMMIT (JobEventLeasedMany). Round trips:
// the listing (with BEGIN), one per tenant claimed from (two when it met
// keyed candidates), and COMMIT with the events; in a caller's
// transaction the events are a round trip of their own.
func claimTenantByTenant(ctx context.Context, s *txn.Session, req ClaimRequest, types []string) ([]runledger.Job, error) {
	b := s.Batch(ctx)
	tenants := txn.Queue(b, "list tenants with due jobs", func(q db.DBTX) ([]uuid.UUID, error) {
		return queries.JobListTenantsWithDueJobs(ctx, q, db.JobListTenantsWithDueJobsParams{JobTypes: types, MaxTenants: int32(req.Limit)})
	})
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	var jobs []runledger.Job
	var events []db.JobEventLeasedManyParams
	for _, tenant := range tenants.Val {
		if len(jobs) >= req.Limit {
			break
		}
		leased, err := claimTenant(ctx, s, req, types, tenant, req.Limit-len(jobs))
		if err != nil {
			return nil, err
		}
		if len(leased) == 0 {
			continue
		}
		ev := db.JobEventLeasedManyParams{OrganizationID: tenant, WorkerID: req.WorkerID}
		for _, r := range leased {
			job, err := rows.Job(r)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, job)
			ev.Ids = append(ev.Ids, r.ID)
			ev.RunNumbers = append(ev.RunNumbers, r.RunNumber)
			ev.Attempts = append(ev.Attempts, r.Attempt)
			ev.Stages = append(ev.Stages, r.Stage)
			ev.LeaseExpiresAts = append(ev.LeaseExpiresAts, *r.LeaseExpiresAt)
		}
		events = append(events, ev)
	}
	if len(events) == 0 {
		return jobs, commit(ctx, s)
	}
	b = s.Batch(ctx)
	for _, ev := range events {
		txn.Queue(b, "write the claim's events", func(q db.DBTX) (struct{}, error) {
			return struct{}{}, queries.JobEventLeasedMany(ctx, q, ev)
		})
	}
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	return jobs, nil
}

// claimTenant leases up to limit of one tenant's due jobs, in claim order:
// JobClaimTenant leases the candidates without an execution resource key
// and returns those with one still PENDING (locked). For those, one round
// trip more: JobClaimTenantTakeClaims takes the claim of each key for its
// most urgent candidate (the first of the key in claim order), where the
// key is free, and JobClaimTenantKeyed leases the candidates that took
// one.
func claimTenant(ctx context.Context, s *txn.Session, req ClaimRequest, types []string, tenant uuid.UUID, limit int) ([]db.JobQueue, error) {
	got, err := queries.JobClaimTenant(ctx, s.DB(), db.JobClaimTenantParams{
		OrganizationID: tenant,
		JobTypes:       types,
		MaxJobs:        int32(limit),
		WorkerID:       req.WorkerID,
		LeaseSeconds:   req.Lease.Seconds(),
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "claim jobs", err)
	}
	var keyed []uuid.UUID
	firstOfKey := map[string]bool{}
	for _, r := range got {
		if r.Status == db.JobStatusLEASED || r.ExecutionResourceKey == nil || firstOfKey[*r.ExecutionResourceKey] {
			continue
		}
		firstOfKey[*r.ExecutionResourceKey] = true
		keyed = append(keyed, r.ID)
	}
	var leasedKeyed map[uuid.UUID]db.JobQueue
	if len(keyed) > 0 {
		b := s.Batch(ctx)
		taken := txn.Queue(b, "take execution resource claims", func(q db.DBTX) (int64, error) {
			return queries.JobClaimTenantTakeClaims(ctx, q, db.JobClaimTenantTakeClaimsParams{
				OrganizationID: tenant, Ids: keyed, WorkerID: req.WorkerID, LeaseSeconds: req.Lease.Seconds(),
			})
		})
		more := txn.Queue(b, "claim jobs", func(q db.DBTX) ([]db.JobClaimTenantKeyedRow, error) {
			return queries.JobClaimTenantKeyed(ctx, q, db.JobClaimTenantKeyedParams{
				OrganizationID: tenant, Ids: keyed, WorkerID: req.WorkerID, LeaseSeconds: req.Lease.Seconds(),
			})
		})
		if err := b.Send(ctx); err != nil {
			return nil, err
		}
		if int64(len(more.Val)) != taken.Val {
			return nil, errs.Invariantf("a tenant's claim took %d execution resource claims and leased %d keyed jobs, want as many", taken.Val, len(more.Val))
		}
		leasedKeyed = make(map[uuid.UUID]db.JobQueue, len(more.Val))
		for _, r := range more.Val {
			leasedKeyed[r.ID] = db.JobQueue(r)
		}
	}
	// JobClaimTenant's order is the claim order; a keyed candidate keeps
	// its place if it was leased.
	out := make([]db.JobQueue, 0, len(got))
	for _, r := range got {
		if r.Status == db.JobStatusLEASED {
			out = append(out, db.JobQueue(r))
		} else if l, ok := leasedKeyed[r.ID]; ok {
			out = append(out, l)
		}
	}
	return out, nil
}

// commit ends an owned session's open transaction with COMMIT, one round
// trip; a joined session's transaction is the caller's, and nothing is
// sent.
func commit(ctx context.Context, s *txn.Session) error {
	if !s.Owned() {
		return nil
	}
	b := s.Batch(ctx)
	b.Commit(ctx)
	return b.Send(ctx)
}

// DueChannel is the LISTEN/NOTIFY channel on which a committed insert of a
// due job (an enqueue, a replay) notifies, with the job's type as payload
// (empty after a replay, whose type is its source's: a wake for every
// listener): at most once per 2 ms per job type per process, so a listener
// must claim every due job of the type when it hears one, not just one. A
// notification may also come for an insert that wrote nothing. On Citus,
// listen on the coordinator, which sends them.
const DueChannel = wake.Channel

// Listen subscribes conn to DueChannel (LISTEN), for a worker that waits
// there for notifications (pgx.Conn.WaitForNotification). The subscription
// lasts as long as the connection: close it, rather than return it to a
// pool, when done.
func Listen(ctx context.Context, conn *pgx.Conn) error {
	if err := queries.WorkerListen(ctx, conn); err != nil {
		return dberr.Translate(ctx, "listen for due jobs", err)
	}
	return nil
}
