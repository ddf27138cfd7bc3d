package lease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

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
)

// The worker's writes (Complete, Fail, Heartbeat, Release and their batch
// forms) identify a job by its lease and are fenced on it: they change a
// job only while it is LEASED at the request's run and attempt to the
// request's worker, and the lease has not expired by the database clock,
// so a worker whose lease ran out can no longer finish the attempt even
// before RecoverExpiredLeases takes the job back.

// heldLease identifies one attempt of a job held by a worker: what the
// worker's writes compare against the stored row, and the scope the caller
// asked for (nil: unscoped).
type heldLease struct {
	Scope     *runledger.Scope
	JobID     uuid.UUID
	RunNumber int32
	Attempt   int32
	WorkerID  string
}

// Result is the outcome of one entry of a batch write: its value, or the
// error that refused it (runledger.CodeLeaseMismatch for a lease that is
// not held; the batch does not read why).
type Result[T any] struct {
	Value T
	Err   error
}

// errBatchInvalid refuses an empty or oversized batch, or one naming a job
// twice.
var errBatchInvalid = errs.Validation("job.batch_invalid",
	"Batch must hold 1 to 1000 entries, each job once.")

// leaseArrays are the lease columns of a batch statement's input, one
// element per entry of one tenant.
type leaseArrays struct {
	ids       []uuid.UUID
	runs      []int32
	attempts  []int32
	workerIDs []string
}

func (a *leaseArrays) add(l heldLease) {
	a.ids = append(a.ids, l.JobID)
	a.runs = append(a.runs, l.RunNumber)
	a.attempts = append(a.attempts, l.Attempt)
	a.workerIDs = append(a.workerIDs, l.WorkerID)
}

// tenantGroup is the entries of a batch (their indexes, in order) whose
// jobs belong to one tenant: each batch statement names one tenant, so
// that on Citus it runs on that tenant's shard.
type tenantGroup struct {
	tenant uuid.UUID
	at     []int
}

// groupByTenant sorts a batch's leases by tenant, the groups in tenant
// order (PostgreSQL's uuid order: bytes), so that a batch over several
// tenants locks its rows in (organization_id, id) order, as every other
// multi-row write of a worker does (each statement locks its own rows in
// id order). A scoped lease's tenant is its scope's. The unscoped ones'
// are read, in one statement for all of them (JobGetTenants; on Citus it
// asks every shard): the one round trip an unscoped write costs beyond a
// scoped one. An unscoped lease on an id no job has is in no group, so it
// gets a lease mismatch.
func groupByTenant(ctx context.Context, s *txn.Session, leases []heldLease) ([]tenantGroup, error) {
	var unscoped []uuid.UUID
	for _, l := range leases {
		if l.Scope == nil {
			unscoped = append(unscoped, l.JobID)
		}
	}
	tenantsOf := map[uuid.UUID][]uuid.UUID{}
	if len(unscoped) > 0 {
		found, err := queries.JobGetTenants(ctx, s.DB(), unscoped)
		if err != nil {
			return nil, dberr.Translate(ctx, "read the tenants of unscoped jobs", err)
		}
		for _, r := range found {
			// On Citus an id is unique only within a tenant: a chosen id
			// reused across tenants is tried in each (the lease matches
			// one at most).
			tenantsOf[r.ID] = append(tenantsOf[r.ID], r.OrganizationID)
		}
	}
	var groups []tenantGroup
	index := map[uuid.UUID]int{}
	put := func(tenant uuid.UUID, i int) {
		g, ok := index[tenant]
		if !ok {
			g = len(groups)
			index[tenant] = g
			groups = append(groups, tenantGroup{tenant: tenant})
		}
		groups[g].at = append(groups[g].at, i)
	}
	for i, l := range leases {
		if l.Scope != nil {
			put(rows.Tenant(*l.Scope), i)
			continue
		}
		for _, t := range tenantsOf[l.JobID] {
			put(t, i)
		}
	}
	slices.SortFunc(groups, func(a, b tenantGroup) int { return bytes.Compare(a.tenant[:], b.tenant[:]) })
	// Each group's entries in id order too: the statements Citus runs
	// (and the release) join the input array without a locking CTE of
	// their own, and lock in the order that join meets the rows.
	for _, g := range groups {
		slices.SortFunc(g.at, func(a, b int) int { return bytes.Compare(leases[a].JobID[:], leases[b].JobID[:]) })
	}
	return groups, nil
}

// writeGroups runs a batch write's statement once per tenant group and
// returns all their rows: nothing to send for no group, one statement
// (autocommit in an owned session) for one, and for several one round
// trip that an owned session wraps in a READ COMMITTED transaction, so
// that the batch is written whole or not at all.
func writeGroups[Row any](ctx context.Context, s *txn.Session, what string, groups []tenantGroup,
	run func(q db.DBTX, g tenantGroup) ([]Row, error)) ([]Row, error) {
	switch len(groups) {
	case 0:
		return nil, nil
	case 1:
		return txn.One(ctx, s, what, func(q db.DBTX) ([]Row, error) { return run(q, groups[0]) })
	}
	b := s.Batch(ctx)
	steps := make([]*txn.Step[[]Row], len(groups))
	for i, g := range groups {
		steps[i] = txn.Queue(b, what, func(q db.DBTX) ([]Row, error) { return run(q, g) })
	}
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	var all []Row
	for _, st := range steps {
		all = append(all, st.Val...)
	}
	return all, nil
}

// writeGroupsThenEvents is writeGroups for a write whose events are a
// statement of their own (on Citus, where a write and the INSERT of its
// events in one statement run as several steps through the coordinator):
// one round trip with every group's write (after BEGIN in an owned
// session), then one with the events of the rows they returned (events
// queues them for one group; nothing for no row) and, in an owned
// session, COMMIT. events returns the statement writing one group's
// events, or nil when its rows have none. So the batch and its events are
// written whole or not at all; a lost reply to the second round trip is
// ErrCommitUnconfirmed.
func writeGroupsThenEvents[Row any](ctx context.Context, s *txn.Session, what string, groups []tenantGroup,
	run func(q db.DBTX, g tenantGroup) ([]Row, error),
	events func(g tenantGroup, rs []Row) func(q db.DBTX) error) ([]Row, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	b := s.Batch(ctx)
	steps := make([]*txn.Step[[]Row], len(groups))
	for i, g := range groups {
		steps[i] = txn.Queue(b, what, func(q db.DBTX) ([]Row, error) { return run(q, g) })
	}
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	b = s.Batch(ctx)
	queued := false
	var all []Row
	for i, st := range steps {
		all = append(all, st.Val...)
		if len(st.Val) == 0 {
			continue
		}
		write := events(groups[i], st.Val)
		if write == nil {
			continue
		}
		txn.Queue(b, what+": events", func(q db.DBTX) (struct{}, error) { return struct{}{}, write(q) })
		queued = true
	}
	b.Commit(ctx)
	if queued || s.Owned() {
		if err := b.Send(ctx); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// leasesOf returns the lease of each request of a batch.
func leasesOf[R any](reqs []R, lease func(R) heldLease) []heldLease {
	out := make([]heldLease, len(reqs))
	for i, r := range reqs {
		out[i] = lease(r)
	}
	return out
}

// validateLeaseScope checks what every worker write names first: its
// optional scope (job.organization_invalid for Organization(uuid.Nil)) and
// its worker id.
func validateLeaseScope(scope *runledger.Scope, workerID string) error {
	if scope != nil {
		if err := validate.Scope(*scope); err != nil {
			return err
		}
	}
	return validateWorkerID(workerID)
}

// validateBatch validates every request of a batch (the first failure wins,
// its detail naming the entry) and that the batch holds 1 to runledger.MaxLimit
// entries, each job once.
func validateBatch[R interface{ Validate() error }](reqs []R, lease func(R) heldLease) error {
	if len(reqs) == 0 || len(reqs) > runledger.MaxLimit {
		return validate.Invalid(errBatchInvalid, "batch holds %d entries, want 1 to %d", len(reqs), runledger.MaxLimit)
	}
	seen := make(map[uuid.UUID]int, len(reqs))
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			var re *runledger.Error
			if errors.As(err, &re) {
				re.Detail = fmt.Sprintf("entry %d: %s", i+1, re.Detail)
			}
			return err
		}
		id := lease(r).JobID
		if j, ok := seen[id]; ok {
			return validate.Invalid(errBatchInvalid, "entries %d and %d are both job %s", j+1, i+1, id)
		}
		seen[id] = i
	}
	return nil
}

// ownedBatch validates a batch, then runs op on a session of its own on
// pool (see ownedWrite).
func ownedBatch[R interface{ Validate() error }, T any](ctx context.Context, pool *pgxpool.Pool, name string, reqs []R, lease func(R) heldLease,
	op func(context.Context, *txn.Session, []R) ([]Result[T], error)) ([]Result[T], error) {
	if err := validateBatch(reqs, lease); err != nil {
		return nil, err
	}
	s, err := txn.Own(ctx, pool, name)
	if err != nil {
		return nil, err
	}
	defer s.End(ctx)
	return op(ctx, s, reqs)
}

// joinedBatch validates a batch, then runs op in the caller's transaction.
func joinedBatch[R interface{ Validate() error }, T any](ctx context.Context, tx pgx.Tx, name string, reqs []R, lease func(R) heldLease,
	op func(context.Context, *txn.Session, []R) ([]Result[T], error)) ([]Result[T], error) {
	if err := validateBatch(reqs, lease); err != nil {
		return nil, err
	}
	return op(ctx, txn.Join(tx, name), reqs)
}

// byID matches a batch statement's rows to its entries, in entry order:
// the row for each entry, or a lease mismatch for an entry without one.
func byID[Row any, T any](op string, leases []heldLease, rows []Row, id func(Row) uuid.UUID, value func(Row) (T, error)) ([]Result[T], error) {
	got := make(map[uuid.UUID]Row, len(rows))
	for _, r := range rows {
		got[id(r)] = r
	}
	if len(got) != len(rows) {
		return nil, errs.Invariantf("%s returned a job twice", op)
	}
	out := make([]Result[T], len(leases))
	for i, l := range leases {
		r, ok := got[l.JobID]
		if !ok {
			out[i].Err = errs.LeaseMismatch.Newf("%s job %s: the lease of run %d attempt %d is not held (or expired)", op, l.JobID, l.RunNumber, l.Attempt)
			continue
		}
		v, err := value(r)
		if err != nil {
			return nil, err
		}
		out[i].Value = v
		delete(got, l.JobID)
	}
	if len(got) != 0 {
		return nil, errs.Invariantf("%s returned a job it was not asked for", op)
	}
	return out, nil
}

// one runs a batch write of one entry and turns a refused entry into the
// reason it was refused, read without a lock (classifyLeaseMiss).
func one[T any](ctx context.Context, s *txn.Session, op string, lease heldLease, results []Result[T], err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	if len(results) != 1 {
		return zero, errs.Invariantf("%s returned %d results for one entry", op, len(results))
	}
	if results[0].Err != nil {
		return zero, classifyLeaseMiss(ctx, s.DB(), op, lease)
	}
	return results[0].Value, nil
}

// classifyLeaseMiss explains a compare-and-set that matched no row, with an
// unlocked read. With a scope the read is scoped like the statement was (a
// job outside it is not found) and the detail names the job's status, run
// and attempt, and an expired lease. Without one the read only tells
// whether the id exists, in any scope, so nothing else of another tenant's
// job can reach the error. Neither ever names the job's worker.
func classifyLeaseMiss(ctx context.Context, q db.DBTX, op string, want heldLease) error {
	request := fmt.Sprintf("request holds run %d attempt %d worker %q", want.RunNumber, want.Attempt, want.WorkerID)
	if want.Scope == nil {
		_, err := queries.JobGetTenant(ctx, q, want.JobID)
		if errors.Is(err, pgx.ErrNoRows) {
			return errs.JobNotFound.Newf("%s job: job %s does not exist", op, want.JobID)
		}
		if err != nil {
			return dberr.Translate(ctx, "read job after lease mismatch", err)
		}
		return errs.LeaseMismatch.Newf(
			"%s job %s: the job exists but that lease is not held (%s; the job's state is shown only to a scoped request)",
			op, want.JobID, request)
	}
	actual, err := queries.JobGetByID(ctx, q, db.JobGetByIDParams{ID: want.JobID, OrganizationID: rows.Tenant(*want.Scope)})
	if errors.Is(err, pgx.ErrNoRows) {
		return errs.JobNotFound.Newf("%s job: job %s not found in scope %s", op, want.JobID, *want.Scope)
	}
	if err != nil {
		return dberr.Translate(ctx, "read job after lease mismatch", err)
	}
	if actual.Status == db.JobStatusLEASED && actual.RunNumber == want.RunNumber && actual.Attempt == want.Attempt &&
		actual.WorkerID != nil && *actual.WorkerID == want.WorkerID && actual.LeaseExpiresAt != nil {
		return errs.LeaseMismatch.Newf("%s job %s: the lease of run %d attempt %d expired at %s",
			op, want.JobID, want.RunNumber, want.Attempt, actual.LeaseExpiresAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
	}
	return errs.LeaseMismatch.Newf(
		"%s job %s: job is %s at run %d attempt %d; %s",
		op, want.JobID, actual.Status, actual.RunNumber, actual.Attempt, request)
}

// validateWorkerID checks a worker id like a job type, without a length
// limit.
func validateWorkerID(workerID string) error {
	switch validate.Text(workerID, 0) {
	case validate.Blank:
		return validate.Invalid(errWorkerIDBlank, "worker id %q is blank", workerID)
	case validate.Unclean:
		return validate.Invalid(errWorkerIDInvalid, "worker id holds a NUL byte or invalid UTF-8")
	}
	return nil
}
