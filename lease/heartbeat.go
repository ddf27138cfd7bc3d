package lease

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// MaxLease is the longest lease a claim or a heartbeat may ask for.
const MaxLease = 24 * time.Hour

var (
	errCheckpointInvalid = errs.Validation("job.checkpoint_invalid",
		"Job checkpoint must be valid JSON.")
	errCheckpointTooLarge = errs.Validation("job.checkpoint_too_large",
		"Job checkpoint is too large.")
)

// HeartbeatRequest renews the lease a worker holds on a job, and may
// record the job's progress and a checkpoint.
type HeartbeatRequest struct {
	// Scope, JobID, RunNumber, Attempt and WorkerID identify the lease, as
	// for CompleteRequest (nil Scope: unscoped).
	Scope     *runledger.Scope
	JobID     uuid.UUID
	RunNumber int32
	Attempt   int32
	WorkerID  string
	// Lease is the new lease, counted from the database's clock at the
	// heartbeat: 1µs to MaxLease.
	Lease time.Duration
	// ProgressDone and ProgressTotal, when set, record progress; nil keeps
	// the stored value.
	ProgressDone  *int64
	ProgressTotal *int64
	// Checkpoint, when not nil, is stored as the job's checkpoint (any
	// JSON value), which a later attempt of the run can read to resume.
	Checkpoint json.RawMessage
	// MaxCheckpointBytes caps len(Checkpoint) for this call; zero (or
	// negative) means runledger.DefaultMaxJSONBytes.
	MaxCheckpointBytes int
}

// Validate checks the request without touching the database: worker id,
// lease (job.lease_duration_invalid: below 1µs or above MaxLease),
// progress (job.progress_invalid) and checkpoint (job.checkpoint_too_large,
// job.checkpoint_invalid).
func (r HeartbeatRequest) Validate() error {
	if err := validateLeaseScope(r.Scope, r.WorkerID); err != nil {
		return err
	}
	if err := validateLease(r.Lease); err != nil {
		return err
	}
	if err := validateProgress(r.ProgressDone, r.ProgressTotal); err != nil {
		return err
	}
	return validateCheckpoint(r.Checkpoint, r.MaxCheckpointBytes)
}

// validateCheckpoint checks a checkpoint a heartbeat or a failure stores:
// nil (keep the stored one), or JSON that jsonb can store of at most max
// bytes (zero or negative: runledger.DefaultMaxJSONBytes).
func validateCheckpoint(checkpoint json.RawMessage, max int) error {
	if checkpoint == nil {
		return nil
	}
	if max := validate.JSONLimit(max); len(checkpoint) > max {
		return validate.Invalid(errCheckpointTooLarge, "job checkpoint must be at most %d bytes, got %d", max, len(checkpoint))
	}
	if err := validate.JSONB(checkpoint); err != nil {
		return validate.Invalid(errCheckpointInvalid, "job checkpoint: %v", err)
	}
	return nil
}

// validateLease checks a requested lease: 1µs (PostgreSQL's precision) to
// MaxLease.
func validateLease(d time.Duration) error {
	if d < time.Microsecond || d > MaxLease {
		return validate.Invalid(errLeaseDurationInvalid, "lease must be between 1µs and %s, got %s", MaxLease, d)
	}
	return nil
}

func (r HeartbeatRequest) lease() heldLease {
	return heldLease{Scope: r.Scope, JobID: r.JobID, RunNumber: r.RunNumber, Attempt: r.Attempt, WorkerID: r.WorkerID}
}

// HeartbeatResult is a renewed lease.
type HeartbeatResult struct {
	JobID uuid.UUID
	// LeaseExpiresAt is the new end of the lease; LastHeartbeatAt the
	// database time of the heartbeat.
	LeaseExpiresAt  time.Time
	LastHeartbeatAt time.Time
	// ProgressDone and ProgressTotal are the job's progress after it.
	ProgressDone  *int64
	ProgressTotal *int64
	// Recorded reports that the progress or the checkpoint changed, and a
	// PROGRESS event was written.
	Recorded bool
}

// Heartbeat renews a lease in one statement on the pool (on Citus, two
// round trips as for Complete when it records progress or a checkpoint):
// fenced on the lease and the database clock as Complete is (LEASED at
// this run and attempt to this worker, not yet expired), it sets
// lease_expires_at to the
// database's clock plus req.Lease and last_heartbeat_at to the clock,
// renews the job's execution resource claim with the lease, and records
// the progress and checkpoint the request gives. A heartbeat that changes
// neither writes no event; one that changes either writes one PROGRESS
// event. A refused heartbeat (runledger.CodeLeaseMismatch: the job was
// canceled, finished, recovered or leased again, or the lease expired;
// runledger.CodeJobNotFound) writes nothing and tells the worker to stop:
// nothing more may be written for that attempt. A lost reply is
// runledger.ErrCommitUnconfirmed.
func Heartbeat(ctx context.Context, pool *pgxpool.Pool, req HeartbeatRequest) (HeartbeatResult, error) {
	return txn.OwnedWrite(ctx, pool, "job heartbeat", req, heartbeatOne)
}

// HeartbeatTx is Heartbeat inside the caller's transaction, which it never
// commits or rolls back; the job stays locked until it ends.
func HeartbeatTx(ctx context.Context, tx pgx.Tx, req HeartbeatRequest) (HeartbeatResult, error) {
	return txn.JoinedWrite(ctx, tx, "job heartbeat", req, heartbeatOne)
}

// HeartbeatMany renews a batch of leases (1 to runledger.MaxLimit, each job once,
// every entry validated first) in one statement on the pool, each as
// Heartbeat does; one result per entry, in order, a refused entry's error
// runledger.CodeLeaseMismatch (the batch does not read why). A worker
// renews every lease it holds with one statement per heartbeat interval.
func HeartbeatMany(ctx context.Context, pool *pgxpool.Pool, reqs []HeartbeatRequest) ([]Result[HeartbeatResult], error) {
	return ownedBatch(ctx, pool, "job heartbeat", reqs, HeartbeatRequest.lease, heartbeatMany)
}

// HeartbeatManyTx is HeartbeatMany inside the caller's transaction, which
// it never commits or rolls back.
func HeartbeatManyTx(ctx context.Context, tx pgx.Tx, reqs []HeartbeatRequest) ([]Result[HeartbeatResult], error) {
	return joinedBatch(ctx, tx, "job heartbeat", reqs, HeartbeatRequest.lease, heartbeatMany)
}

func heartbeatOne(ctx context.Context, s *txn.Session, req HeartbeatRequest) (HeartbeatResult, error) {
	results, err := heartbeatMany(ctx, s, []HeartbeatRequest{req})
	return one(ctx, s, "heartbeat", req.lease(), results, err)
}

func heartbeatMany(ctx context.Context, s *txn.Session, reqs []HeartbeatRequest) ([]Result[HeartbeatResult], error) {
	leases := leasesOf(reqs, HeartbeatRequest.lease)
	groups, err := groupByTenant(ctx, s, leases)
	if err != nil {
		return nil, err
	}
	params := func(g tenantGroup) db.JobHeartbeatManyParams {
		var a leaseArrays
		p := db.JobHeartbeatManyParams{OrganizationID: g.tenant}
		for _, i := range g.at {
			r := reqs[i]
			a.add(leases[i])
			p.LeaseSeconds = append(p.LeaseSeconds, r.Lease.Seconds())
			p.ProgressDone = append(p.ProgressDone, orKeep(r.ProgressDone))
			p.ProgressTotal = append(p.ProgressTotal, orKeep(r.ProgressTotal))
			p.Checkpoints = append(p.Checkpoints, r.Checkpoint)
		}
		p.Ids, p.RunNumbers, p.Attempts, p.WorkerIds = a.ids, a.runs, a.attempts, a.workerIDs
		return p
	}
	// Citus needs its own form: the one-server statement locks its rows in
	// a CTE, which Citus cannot run in one step. Asked once per process.
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	var rs []db.JobHeartbeatManyRow
	switch {
	case dist && recordsProgress(reqs):
		// On Citus the renewal and its events are two statements, each run
		// in one step on the tenant's shard, as for completion.
		var stages map[uuid.UUID]string
		rs, err = writeGroupsThenEvents(ctx, s, "renew job leases", groups, func(q db.DBTX, g tenantGroup) ([]db.JobHeartbeatManyRow, error) {
			got, err := queries.JobHeartbeatManyRouted(ctx, q, db.JobHeartbeatManyRoutedParams(params(g)))
			return heartbeatRows(got, &stages), err
		}, func(g tenantGroup, rs []db.JobHeartbeatManyRow) func(q db.DBTX) error {
			workers := make(map[uuid.UUID]string, len(g.at))
			for _, i := range g.at {
				workers[leases[i].JobID] = leases[i].WorkerID
			}
			e := db.JobEventProgressManyParams{OrganizationID: g.tenant}
			for _, r := range rs {
				if !r.Changed {
					continue
				}
				e.Ids = append(e.Ids, r.ID)
				e.RunNumbers = append(e.RunNumbers, r.RunNumber)
				e.Attempts = append(e.Attempts, r.Attempt)
				e.Stages = append(e.Stages, stages[r.ID])
				e.ProgressDone = append(e.ProgressDone, orKeep(r.ProgressDone))
				e.ProgressTotal = append(e.ProgressTotal, orKeep(r.ProgressTotal))
				e.WorkerIds = append(e.WorkerIds, workers[r.ID])
			}
			if len(e.Ids) == 0 {
				return nil
			}
			return func(q db.DBTX) error { return queries.JobEventProgressMany(ctx, q, e) }
		})
	case dist:
		// No entry records progress or a checkpoint, so no lease renewed
		// changes either and there are no events: the renewal alone, in one
		// step on Citus, as one statement per tenant like writeGroups.
		rs, err = writeGroups(ctx, s, "renew job leases", groups, func(q db.DBTX, g tenantGroup) ([]db.JobHeartbeatManyRow, error) {
			got, err := queries.JobHeartbeatManyRouted(ctx, q, db.JobHeartbeatManyRoutedParams(params(g)))
			return heartbeatRows(got, nil), err
		})
	default:
		rs, err = writeGroups(ctx, s, "renew job leases", groups, func(q db.DBTX, g tenantGroup) ([]db.JobHeartbeatManyRow, error) {
			return queries.JobHeartbeatMany(ctx, q, params(g))
		})
	}
	if err != nil {
		return nil, err
	}
	return byID("heartbeat", leases, rs, func(r db.JobHeartbeatManyRow) uuid.UUID { return r.ID },
		func(r db.JobHeartbeatManyRow) (HeartbeatResult, error) {
			if r.LeaseExpiresAt == nil || r.LastHeartbeatAt == nil {
				return HeartbeatResult{}, errs.Invariant("a renewed lease has no expiry or heartbeat time")
			}
			return HeartbeatResult{JobID: r.ID, LeaseExpiresAt: r.LeaseExpiresAt.UTC(), LastHeartbeatAt: r.LastHeartbeatAt.UTC(),
				ProgressDone: r.ProgressDone, ProgressTotal: r.ProgressTotal, Recorded: r.Changed}, nil
		})
}

// ReleaseRequest hands back a job a worker leased but has not started.
type ReleaseRequest struct {
	// Scope, JobID, RunNumber, Attempt and WorkerID identify the lease, as
	// for CompleteRequest (nil Scope: unscoped).
	Scope     *runledger.Scope
	JobID     uuid.UUID
	RunNumber int32
	Attempt   int32
	WorkerID  string
}

// Validate checks the scope (job.organization_invalid) and the worker id
// without touching the database.
func (r ReleaseRequest) Validate() error { return validateLeaseScope(r.Scope, r.WorkerID) }

func (r ReleaseRequest) lease() heldLease { return heldLease(r) }

// Release hands back a batch of leased jobs their worker has not started
// (1 to runledger.MaxLimit, each job once), in one statement on the pool
// (on Citus two round trips, as for Complete), without
// spending their attempt: each is PENDING again at attempt - 1, stage
// queued, due as it was, with its worker, lease and start cleared and its
// execution resource claim released, and one STAGE_CHANGED event naming
// the worker. Fenced on each lease as Complete is; one result per entry, in
// order. A worker shutting down calls it for the jobs it claimed but never
// ran.
func Release(ctx context.Context, pool *pgxpool.Pool, reqs []ReleaseRequest) ([]Result[runledger.Job], error) {
	return ownedBatch(ctx, pool, "job release", reqs, ReleaseRequest.lease, release)
}

// ReleaseTx is Release inside the caller's transaction, which it never
// commits or rolls back.
func ReleaseTx(ctx context.Context, tx pgx.Tx, reqs []ReleaseRequest) ([]Result[runledger.Job], error) {
	return joinedBatch(ctx, tx, "job release", reqs, ReleaseRequest.lease, release)
}

func release(ctx context.Context, s *txn.Session, reqs []ReleaseRequest) ([]Result[runledger.Job], error) {
	leases := leasesOf(reqs, ReleaseRequest.lease)
	groups, err := groupByTenant(ctx, s, leases)
	if err != nil {
		return nil, err
	}
	params := func(g tenantGroup) db.JobReleaseManyParams {
		var a leaseArrays
		for _, i := range g.at {
			a.add(leases[i])
		}
		return db.JobReleaseManyParams{
			OrganizationID: g.tenant, Ids: a.ids, RunNumbers: a.runs, Attempts: a.attempts, WorkerIds: a.workerIDs,
		}
	}
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	var rs []db.JobReleaseManyRow
	if dist {
		// On Citus the release and its events are two statements, each
		// run in one step on the tenant's shard (JobReleaseManyRouted).
		rs, err = writeGroupsThenEvents(ctx, s, "release jobs", groups, func(q db.DBTX, g tenantGroup) ([]db.JobReleaseManyRow, error) {
			got, err := queries.JobReleaseManyRouted(ctx, q, db.JobReleaseManyRoutedParams(params(g)))
			out := make([]db.JobReleaseManyRow, len(got))
			for i, r := range got {
				out[i] = db.JobReleaseManyRow(r)
			}
			return out, err
		}, func(g tenantGroup, rs []db.JobReleaseManyRow) func(q db.DBTX) error {
			// The worker that released a job is the one its lease named,
			// the row's worker before the release cleared it.
			worker := map[uuid.UUID]string{}
			for _, i := range g.at {
				worker[leases[i].JobID] = leases[i].WorkerID
			}
			e := db.JobEventReleasedManyParams{OrganizationID: g.tenant}
			for _, r := range rs {
				e.Ids = append(e.Ids, r.ID)
				e.RunNumbers = append(e.RunNumbers, r.RunNumber)
				e.Attempts = append(e.Attempts, r.Attempt+1)
				e.Stages = append(e.Stages, r.Stage)
				e.WorkerIds = append(e.WorkerIds, worker[r.ID])
			}
			return func(q db.DBTX) error { return queries.JobEventReleasedMany(ctx, q, e) }
		})
	} else {
		rs, err = writeGroups(ctx, s, "release jobs", groups, func(q db.DBTX, g tenantGroup) ([]db.JobReleaseManyRow, error) {
			return queries.JobReleaseMany(ctx, q, params(g))
		})
	}
	if err != nil {
		return nil, err
	}
	return byID("release", leases, rs, func(r db.JobReleaseManyRow) uuid.UUID { return r.ID },
		func(r db.JobReleaseManyRow) (runledger.Job, error) { return rows.Job(db.JobQueue(r)) })
}

// recordsProgress reports whether any entry of a heartbeat batch gives
// progress or a checkpoint, the only way a renewal writes an event.
func recordsProgress(reqs []HeartbeatRequest) bool {
	for _, r := range reqs {
		if r.ProgressDone != nil || r.ProgressTotal != nil || r.Checkpoint != nil {
			return true
		}
	}
	return false
}

// heartbeatRows are JobHeartbeatManyRouted's rows as JobHeartbeatMany's,
// each job's stage kept in *stages when stages is not nil.
func heartbeatRows(got []db.JobHeartbeatManyRoutedRow, stages *map[uuid.UUID]string) []db.JobHeartbeatManyRow {
	out := make([]db.JobHeartbeatManyRow, len(got))
	for i, r := range got {
		out[i] = db.JobHeartbeatManyRow{ID: r.ID, OrganizationID: r.OrganizationID, RunNumber: r.RunNumber,
			Attempt: r.Attempt, LeaseExpiresAt: r.LeaseExpiresAt, LastHeartbeatAt: r.LastHeartbeatAt,
			ProgressDone: r.ProgressDone, ProgressTotal: r.ProgressTotal, Changed: r.Changed}
		if stages != nil {
			if *stages == nil {
				*stages = map[uuid.UUID]string{}
			}
			(*stages)[r.ID] = r.Stage
		}
	}
	return out
}
