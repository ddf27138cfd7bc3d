package health

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// The batch sizes of a prune: candidates per transaction.
const (
	DefaultPruneBatch = 1000
	MaxPruneBatch     = 10_000
)

var (
	errCutoffInvalid = errs.Validation("health.prune_cutoff_invalid",
		"Prune cutoff must be set.")
	errStatusInvalid = errs.Validation("health.prune_status_invalid",
		"Prune status must be SUCCEEDED, DEAD_LETTERED or CANCELED.")
	errBatchInvalid = errs.Validation("health.prune_batch_invalid",
		"Prune batch size must be between 1 and 10000.")
)

// finishedStatuses are the statuses a prune may delete, in the order a
// request without statuses uses.
var finishedStatuses = []runledger.JobStatus{
	runledger.JobStatusSucceeded, runledger.JobStatusDeadLettered, runledger.JobStatusCanceled,
}

// PruneRequest selects what Prune deletes.
type PruneRequest struct {
	// Scope limits the prune to one tenant (runledger.Global() is the
	// global scope's own jobs); nil prunes every tenant, one after another.
	Scope *runledger.Scope
	// FinishedBefore is the cutoff: jobs that finished (finished_at)
	// strictly before it may be deleted. Exactly one of FinishedBefore and
	// OlderThan is set.
	FinishedBefore time.Time
	// OlderThan is the cutoff as an age: jobs that finished more than
	// OlderThan before the database clock's now() (read once, when the
	// prune starts) may be deleted. Measured against the database, never
	// the process, so a machine whose clock runs ahead deletes nothing
	// that finished within OlderThan. Positive when set.
	OlderThan time.Duration
	// Statuses are the finished statuses to delete (SUCCEEDED,
	// DEAD_LETTERED, CANCELED); empty means all three.
	Statuses []runledger.JobStatus
	// BatchSize is the most candidates one transaction takes (1 to
	// MaxPruneBatch; 0 means DefaultPruneBatch). A batch also takes every
	// job in the candidates' lineage families.
	BatchSize int
	// DryRun reports what a prune would delete and deletes nothing (each
	// batch is rolled back; it takes and releases the same locks).
	DryRun bool
	// Progress, when set, is called after every batch with the totals so
	// far.
	Progress func(PruneResult)
}

// Validate checks the request without database work.
func (r PruneRequest) Validate() error {
	if r.Scope != nil {
		if err := validate.Scope(*r.Scope); err != nil {
			return err
		}
	}
	switch {
	case r.FinishedBefore.IsZero() && r.OlderThan == 0:
		return errCutoffInvalid.New("the prune cutoff is not set: give FinishedBefore or OlderThan")
	case !r.FinishedBefore.IsZero() && r.OlderThan != 0:
		return errCutoffInvalid.New("the prune cutoff is given twice: give only one of FinishedBefore and OlderThan")
	case r.OlderThan < 0:
		return errCutoffInvalid.Newf("the prune cutoff OlderThan %s must be positive", r.OlderThan)
	}
	for _, s := range r.Statuses {
		if !slices.Contains(finishedStatuses, s) {
			return errStatusInvalid.Newf("status %q is not a finished status", s)
		}
	}
	if r.BatchSize < 0 || r.BatchSize > MaxPruneBatch {
		return errBatchInvalid.Newf("batch size %d is not between 1 and %d", r.BatchSize, MaxPruneBatch)
	}
	return nil
}

// PruneResult is what a prune did (or, in a dry run, would do).
type PruneResult struct {
	// DryRun is the request's.
	DryRun bool
	// Cutoff is the cutoff the prune used: the request's FinishedBefore,
	// or the database clock minus its OlderThan. Zero when the prune
	// failed before it read the clock.
	Cutoff time.Time
	// DeletedJobs and DeletedEvents count the jobs and events deleted.
	DeletedJobs, DeletedEvents int64
	// KeptForLineage counts jobs the cutoff selected that were kept
	// because another job of their lineage family must stay (it is live,
	// finished after the cutoff, of another status, owned by a workflow
	// step, or held by another transaction right then).
	KeptForLineage int64
	// KeptForWorkflow counts jobs the cutoff selected that a workflow step
	// owns: the workflow's retention decides about them, never a prune.
	KeptForWorkflow int64
	// Skipped counts jobs the cutoff selected that another transaction
	// held, that changed since, or whose execution resource claim has not
	// been released yet: a later prune takes them.
	Skipped int64
	// Batches counts the transactions run.
	Batches int
}

// Prune deletes the finished jobs that the request selects, with their
// events, lineage rows and execution resource claims, in batches of one
// READ COMMITTED transaction each; no lock is held from one batch to the
// next. A batch takes the next candidates in finish order (a keyset
// cursor, so a kept job is read once per run), walks their lineage
// families (a source and its replays, transitively, in either direction)
// and locks the members FOR UPDATE SKIP LOCKED: it never waits for a row a
// worker, a replay or a requeue holds. A family is deleted whole, or kept
// whole when any member may not be deleted, so no kept job loses its
// lineage and no replay's idempotency guard disappears while its source
// stays. Jobs a workflow step owns are never deleted. Without a scope the
// tenants holding candidates are pruned one after another; with one, no
// other tenant's row is read or written.
//
// A prune interrupted (its context ended, the connection lost) keeps the
// batches it committed; running it again resumes (what is left is
// selected afresh). On error the result holds what committed before it.
func Prune(ctx context.Context, pool *pgxpool.Pool, req PruneRequest) (PruneResult, error) {
	res := PruneResult{DryRun: req.DryRun}
	if err := req.Validate(); err != nil {
		return res, err
	}
	statuses := req.Statuses
	if len(statuses) == 0 {
		statuses = finishedStatuses
	}
	p := pruner{req: req, res: &res, batch: req.BatchSize, cutoff: req.FinishedBefore.UTC()}
	if p.batch == 0 {
		p.batch = DefaultPruneBatch
	}
	for _, s := range statuses {
		if !slices.Contains(p.statuses, string(s)) {
			p.statuses = append(p.statuses, string(s))
		}
	}
	s, err := txn.Own(ctx, pool, pruneOperation)
	if err != nil {
		return res, err
	}
	defer s.End(ctx)
	if req.OlderThan > 0 {
		now, err := queries.ServerClock(ctx, s.DB())
		if err != nil {
			return res, dberr.Translate(ctx, "read the database clock for the prune cutoff", err)
		}
		p.cutoff = now.Add(-req.OlderThan).UTC()
	}
	res.Cutoff = p.cutoff

	var tenants []uuid.UUID
	if req.Scope != nil {
		tenants = []uuid.UUID{rows.Tenant(*req.Scope)}
	} else {
		tenants, err = queries.JobPruneListTenants(ctx, s.DB(), db.JobPruneListTenantsParams{Statuses: p.statuses, Cutoff: p.cutoff})
		if err != nil {
			return res, dberr.Translate(ctx, "list tenants to prune", err)
		}
	}
	for _, tenant := range tenants {
		if err := p.tenant(ctx, s, tenant); err != nil {
			return res, err
		}
	}
	return res, nil
}

const pruneOperation = "prune"

// pruner is one Prune's state.
type pruner struct {
	req      PruneRequest
	res      *PruneResult
	batch    int
	cutoff   time.Time
	statuses []string
}

// family is one lineage family of a batch.
type family struct {
	members    []uuid.UUID
	allLocked  bool
	candidates []db.JobPruneLockBatchRow
}

// tenant prunes one tenant, a batch at a time, until a batch finds fewer
// candidates than it asked for.
func (p *pruner) tenant(ctx context.Context, s *txn.Session, tenant uuid.UUID) error {
	var afterAt time.Time
	var afterID uuid.UUID
	for {
		b := s.Batch(ctx)
		lock := txn.Queue(b, "lock a prune batch", func(q db.DBTX) ([]db.JobPruneLockBatchRow, error) {
			return queries.JobPruneLockBatch(ctx, q, db.JobPruneLockBatchParams{
				OrganizationID: tenant, Statuses: p.statuses, Cutoff: p.cutoff,
				AfterFinishedAt: afterAt, AfterID: afterID, BatchSize: int32(p.batch),
			})
		})
		if err := b.Send(ctx); err != nil {
			return err
		}
		var (
			order      []uuid.UUID
			families   = map[uuid.UUID]*family{}
			candidates int
		)
		for _, r := range lock.Val {
			f := families[r.Family]
			if f == nil {
				f = &family{allLocked: true}
				families[r.Family] = f
				order = append(order, r.Family)
			}
			f.members = append(f.members, r.ID)
			f.allLocked = f.allLocked && r.Locked
			if r.CandidateFinishedAt != nil {
				f.candidates = append(f.candidates, r)
				candidates++
				if at := *r.CandidateFinishedAt; at.After(afterAt) || (at.Equal(afterAt) && bytes.Compare(r.ID[:], afterID[:]) > 0) {
					afterAt, afterID = at, r.ID
				}
			}
		}
		var ids, fams, counted []uuid.UUID
		for _, key := range order {
			f := families[key]
			if f.allLocked {
				for _, id := range f.members {
					ids, fams = append(ids, id), append(fams, key)
				}
				for _, c := range f.candidates {
					counted = append(counted, c.ID)
				}
				continue
			}
			for _, c := range f.candidates {
				switch {
				case c.WorkflowOwned:
					p.res.KeptForWorkflow++
				case !c.Locked:
					p.res.Skipped++
				default:
					p.res.KeptForLineage++
				}
			}
		}
		if err := p.finish(ctx, s, tenant, ids, fams, counted); err != nil {
			return err
		}
		p.res.Batches++
		if p.req.Progress != nil {
			p.req.Progress(*p.res)
		}
		if candidates < p.batch {
			return nil
		}
	}
}

// finish ends a batch: it deletes the families it locked whole (ids, each
// in the family fams gives it) and commits. A dry run rolls back instead
// and counts the candidates among them (counted) with their events: a
// family member is a candidate of exactly one batch of a run, so each job
// is counted once although nothing is deleted.
func (p *pruner) finish(ctx context.Context, s *txn.Session, tenant uuid.UUID, ids, fams, counted []uuid.UUID) error {
	if len(ids) == 0 {
		return s.Rollback(ctx)
	}
	if p.req.DryRun {
		if err := s.Rollback(ctx); err != nil {
			return err
		}
		events, err := queries.JobPruneCountEvents(ctx, s.DB(), db.JobPruneCountEventsParams{OrganizationID: tenant, JobIds: counted})
		if err != nil {
			return dberr.Translate(ctx, "count the events a prune would delete", err)
		}
		p.res.DeletedJobs += int64(len(counted))
		p.res.DeletedEvents += events
		return nil
	}
	b := s.Batch(ctx)
	del := txn.Queue(b, "delete a prune batch", func(q db.DBTX) (db.JobPruneDeleteRow, error) {
		return queries.JobPruneDelete(ctx, q, db.JobPruneDeleteParams{OrganizationID: tenant, JobIds: ids, Families: fams})
	})
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return err
	}
	p.res.DeletedJobs += del.Val.DeletedJobs
	p.res.DeletedEvents += del.Val.DeletedEvents
	// Families a replay linked to a job outside the batch after its
	// snapshot were kept.
	p.res.KeptForLineage += int64(len(ids)) - del.Val.DeletedJobs
	return nil
}

// PruneLockKey is the PostgreSQL advisory lock (session-level) that
// TryPrune holds while it runs: one scheduled prune at a time across
// processes.
const PruneLockKey int64 = 0x726c_7072_756e // "rlprun"

// TryPrune is Prune unless another TryPrune is running anywhere on the
// database: it holds PruneLockKey, taken without waiting on a connection
// of its own, for the whole prune. It reports false, with nothing done,
// when another holds the lock.
func TryPrune(ctx context.Context, pool *pgxpool.Pool, req PruneRequest) (PruneResult, bool, error) {
	if err := req.Validate(); err != nil {
		return PruneResult{DryRun: req.DryRun}, false, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return PruneResult{DryRun: req.DryRun}, false, dberr.Translate(ctx, "acquire the prune lock's connection", err)
	}
	defer conn.Release()
	got, err := queries.JobPruneTryLock(ctx, txn.Wrap(conn), PruneLockKey)
	if err != nil {
		return PruneResult{DryRun: req.DryRun}, false, dberr.Translate(ctx, "take the prune lock", err)
	}
	if !got {
		return PruneResult{DryRun: req.DryRun}, false, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if _, err := queries.JobPruneUnlock(uctx, txn.Wrap(conn), PruneLockKey); err != nil {
			// A connection whose unlock failed may still hold the lock:
			// close it, which releases it.
			_ = conn.Conn().Close(uctx)
		}
	}()
	res, err := Prune(ctx, pool, req)
	return res, true, err
}
