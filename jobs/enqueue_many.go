package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/wake"
)

// MaxEnqueueMany is the most requests one EnqueueMany call takes.
const MaxEnqueueMany = 10_000

// errEnqueueManyTooLarge refuses a batch over MaxEnqueueMany requests.
var errEnqueueManyTooLarge = errs.Validation("job.enqueue_many_too_large",
	"Too many requests in one bulk enqueue (at most 10000).")

// EnqueueManyResult is the outcome of one request of EnqueueMany: the job
// it created or found (as EnqueueResult), or Err when the request was
// refused and wrote nothing.
type EnqueueManyResult struct {
	// Job and Disposition are set when Err is nil.
	Job         runledger.Job
	Disposition runledger.Disposition
	// Err is a *runledger.Error: one of Validate's codes,
	// runledger.CodeIdempotencyConflict, or
	// runledger.CodeDefinitionNotFoundOrDisabled.
	Err error
}

// EnqueueMany enqueues up to MaxEnqueueMany requests in one READ
// COMMITTED transaction of its own and returns one result per request, in
// input order. Each request keeps Enqueue's semantics (validation, the
// definition's defaults, keyed and chosen-id idempotency): a refused
// request (invalid, its key held by a different request, its type missing
// or disabled) gets its error in its result and writes nothing, and does
// not stop the others. Two requests of one batch with the same key behave
// as two Enqueue calls in input order: the first inserts, the second gets
// Existing (same request) or a conflict.
//
// The jobs and their ENQUEUED events are written by one statement on one
// server (on Citus: per tenant, a read of its types' definitions, then, in
// a round trip of its own, an insert, and a statement for its events, all
// in the same transaction), then the jobs holding the keys or ids of the
// requests that inserted nothing are locked FOR NO KEY UPDATE and
// compared, the workers are woken (one notification for the batch) and
// the transaction commits: two round trips (three on Citus). What is written is all or
// nothing: an error returned (more than MaxEnqueueMany requests, a
// database failure) means no job of the batch was written, except that a
// failed COMMIT matches runledger.ErrCommitUnconfirmed (the outcome is
// unknown; repeating a batch of keyed requests is safe).
//
// Two concurrent batches with overlapping keys insert their rows in
// (tenant, type, key) order, so they wait for each other without
// deadlocking; the one that waited then finds the other's jobs, as a
// keyed Enqueue does. Requests with a chosen JobID and no key are
// inserted in input order: two batches naming the same ids in opposite
// orders can deadlock, and PostgreSQL then fails one of them (transient,
// nothing written; retry it).
func EnqueueMany(ctx context.Context, pool *pgxpool.Pool, reqs []EnqueueRequest) ([]EnqueueManyResult, error) {
	if len(reqs) > MaxEnqueueMany {
		return nil, tooMany(len(reqs))
	}
	s, err := txn.Own(ctx, pool, manyOperation)
	if err != nil {
		return nil, err
	}
	defer s.End(ctx)
	return enqueueMany(ctx, s, reqs)
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction, which it
// never commits or rolls back. A batch holding a keyed request or one with
// a chosen JobID requires READ COMMITTED (else an error with
// runledger.CodeEnqueueUnsupportedIsolation, nothing written). Existing
// jobs it found stay locked until the caller's transaction ends.
func EnqueueManyTx(ctx context.Context, tx pgx.Tx, reqs []EnqueueRequest) ([]EnqueueManyResult, error) {
	if len(reqs) > MaxEnqueueMany {
		return nil, tooMany(len(reqs))
	}
	return enqueueMany(ctx, txn.Join(tx, manyOperation), reqs)
}

const manyOperation = "bulk job enqueue"

func tooMany(n int) error {
	return errEnqueueManyTooLarge.Newf("bulk enqueue of %d requests, at most %d", n, MaxEnqueueMany)
}

// manyItem is a valid request of a batch: its position and its
// statement arguments.
type manyItem struct {
	at  int
	req EnqueueRequest
	p   db.JobEnqueueParams
}

// tenantID is a job's identity across tenants (on Citus an id is unique
// only within its tenant).
type tenantID struct{ org, id uuid.UUID }

func enqueueMany(ctx context.Context, s *txn.Session, reqs []EnqueueRequest) ([]EnqueueManyResult, error) {
	results := make([]EnqueueManyResult, len(reqs))
	items := make([]manyItem, 0, len(reqs))
	idempotent := false
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			results[i].Err = err
			continue
		}
		p, err := enqueueParams(r)
		if err != nil {
			return nil, err
		}
		items = append(items, manyItem{at: i, req: r, p: p})
		idempotent = idempotent || r.idempotent()
	}
	if len(items) == 0 {
		return results, nil
	}
	if idempotent {
		if err := txn.CheckCallerTx(ctx, s, manyOperation, errs.EnqueueUnsupportedIsolation); err != nil {
			return nil, err
		}
	}
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	groups := byTenant(items)

	// Round trip one: [BEGIN,] the inserts; on Citus, the definitions of
	// each tenant's types, and the inserts in a round trip of their own.
	b := s.Batch(ctx)
	var one *txn.Step[[]db.JobEnqueueManyRow]
	var routed []*txn.Step[[]db.JobQueue]
	if dist {
		if routed, err = enqueueManyRouted(ctx, s, b, groups, idempotent); err != nil {
			return nil, err
		}
	} else {
		one = txn.Queue(b, "enqueue jobs", func(q db.DBTX) ([]db.JobEnqueueManyRow, error) {
			return queries.JobEnqueueMany(ctx, q, manyParams(items, idempotent))
		})
		if err := b.Send(ctx); err != nil {
			return nil, err
		}
	}
	inserted := map[tenantID]db.JobQueue{}
	if one != nil {
		for _, r := range one.Val {
			inserted[tenantID{r.OrganizationID, r.ID}] = db.JobQueue(r)
		}
	}
	for _, st := range routed {
		if st == nil {
			continue
		}
		for _, r := range st.Val {
			inserted[tenantID{r.OrganizationID, r.ID}] = db.JobQueue(r)
		}
	}

	// Which request wrote each row: the one whose id, type and key it
	// has, the first in input order when several share them (a chosen id
	// given twice in the batch inserts once).
	won := map[int]db.JobQueue{}
	claimed := map[tenantID]bool{}
	for _, it := range items {
		k := tenantID{it.p.OrganizationID, it.p.ID}
		r, ok := inserted[k]
		if ok && !claimed[k] && r.JobType == it.p.JobType && sameKey(r.IdempotencyKey, it.p.IdempotencyKey) {
			claimed[k] = true
			won[it.at] = r
		}
	}

	// Round trip two: the events (Citus), the lookups of what inserted
	// nothing, the definitions when some request inserted nothing, the
	// wake-up[, COMMIT].
	b = s.Batch(ctx)
	if dist {
		for _, g := range groups {
			ev := db.JobEventEnqueuedManyParams{OrganizationID: g[0].p.OrganizationID}
			for _, it := range g {
				if r, ok := won[it.at]; ok {
					ev.Ids = append(ev.Ids, r.ID)
					ev.Stages = append(ev.Stages, r.Stage)
					ev.JobTypes = append(ev.JobTypes, r.JobType)
				}
			}
			if len(ev.Ids) > 0 {
				txn.Queue(b, "record the enqueued events", func(q db.DBTX) (struct{}, error) {
					return struct{}{}, queries.JobEventEnqueuedMany(ctx, q, ev)
				})
			}
		}
	}
	type found struct {
		job  db.JobQueue
		same bool
	}
	byKey := map[int]found{} // by position in reqs
	byID := map[int]found{}
	missed := false
	for _, g := range groups {
		var keyed, chosen []manyItem
		for _, it := range g {
			if _, ok := won[it.at]; ok {
				continue
			}
			missed = true
			if it.req.keyed() {
				keyed = append(keyed, it)
			}
			if it.req.JobID != uuid.Nil {
				chosen = append(chosen, it)
			}
		}
		if len(keyed) > 0 {
			var types, keys []string
			var snaps []json.RawMessage
			for _, it := range keyed {
				types = append(types, it.p.JobType)
				keys = append(keys, *it.p.IdempotencyKey)
				snaps = append(snaps, it.p.EnqueueRequest)
			}
			org := g[0].p.OrganizationID
			txn.Queue(b, "lock jobs by idempotency key", func(q db.DBTX) (struct{}, error) {
				if org == uuid.Nil {
					got, err := queries.JobLockManyByIdempotencyKeyGlobal(ctx, q, db.JobLockManyByIdempotencyKeyGlobalParams{
						JobTypes: types, IdempotencyKeys: keys, EnqueueRequests: snaps,
					})
					for _, r := range got {
						byKey[keyed[r.Ord-1].at] = found{r.JobQueue, r.SameRequest}
					}
					return struct{}{}, err
				}
				got, err := queries.JobLockManyByIdempotencyKeyOrg(ctx, q, db.JobLockManyByIdempotencyKeyOrgParams{
					OrganizationID: org, JobTypes: types, IdempotencyKeys: keys, EnqueueRequests: snaps,
				})
				for _, r := range got {
					byKey[keyed[r.Ord-1].at] = found{r.JobQueue, r.SameRequest}
				}
				return struct{}{}, err
			})
		}
		if len(chosen) > 0 {
			var ids []uuid.UUID
			var snaps []json.RawMessage
			for _, it := range chosen {
				ids = append(ids, it.p.ID)
				snaps = append(snaps, it.p.EnqueueRequest)
			}
			org := g[0].p.OrganizationID
			txn.Queue(b, "lock jobs by chosen id", func(q db.DBTX) (struct{}, error) {
				got, err := queries.JobLockManyForEnqueueByID(ctx, q, db.JobLockManyForEnqueueByIDParams{
					OrganizationID: org, Ids: ids, EnqueueRequests: snaps,
				})
				for _, r := range got {
					byID[chosen[r.Ord-1].at] = found{r.JobQueue, r.SameRequest}
				}
				return struct{}{}, err
			})
		}
	}
	var defs *txn.Step[[]db.JobDefinition]
	if missed {
		defs = txn.Queue(b, "read job definitions", func(q db.DBTX) ([]db.JobDefinition, error) {
			return queries.JobDefinitionList(ctx, q)
		})
	}
	wake.Queue(ctx, b, manyWakes(inserted)...)
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	enabled := map[string]bool{}
	if defs != nil {
		for _, d := range defs.Val {
			enabled[d.JobType] = d.IsEnabled
		}
	}

	for _, it := range items {
		res := &results[it.at]
		if r, ok := won[it.at]; ok {
			job, err := rows.Job(r)
			if err != nil {
				return nil, err
			}
			res.Job, res.Disposition = job, runledger.DispositionInserted
			continue
		}
		f, ok := byKey[it.at]
		viaID := false
		if !ok {
			f, ok = byID[it.at]
			viaID = ok
		}
		switch {
		case ok && f.same:
			job, err := rows.Job(f.job)
			if err != nil {
				return nil, err
			}
			res.Job, res.Disposition = job, runledger.DispositionExisting
		case ok && viaID:
			res.Err = errs.IdempotencyConflict.Newf(
				"job id %s is held by a job enqueued with a different request", it.p.ID)
		case ok:
			res.Err = errs.IdempotencyConflict.New(fmt.Sprintf(
				"job %s of type %q in scope %s holds idempotency key %q with a different request",
				f.job.ID, it.req.JobType, it.req.Scope, it.req.IdempotencyKey))
		case !enabled[it.p.JobType]:
			res.Err = errs.DefinitionUnavailableFor(it.p.JobType)
		case it.req.JobID != uuid.Nil:
			// On one server a chosen id may be held in another tenant,
			// which the tenant's lookup does not see: a conflict that
			// names nothing of that job.
			res.Err = errs.IdempotencyConflict.Newf(
				"job id %s is held by a job enqueued with a different request", it.p.ID)
		default:
			res.Err = errIdempotencyMissingExisting.Newf(
				"bulk enqueue of type %q key %q in scope %s inserted nothing, the definition is enabled, and no job holds the key",
				it.req.JobType, it.req.IdempotencyKey, it.req.Scope)
		}
	}
	return results, nil
}

// byTenant groups valid requests by tenant, in tenant order, each group
// in input order.
func byTenant(items []manyItem) [][]manyItem {
	idx := map[uuid.UUID]int{}
	var groups [][]manyItem
	for _, it := range items {
		gi, ok := idx[it.p.OrganizationID]
		if !ok {
			gi = len(groups)
			idx[it.p.OrganizationID] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], it)
	}
	slices.SortFunc(groups, func(a, b []manyItem) int {
		return slices.Compare(a[0].p.OrganizationID[:], b[0].p.OrganizationID[:])
	})
	return groups
}

// manyParams is JobEnqueueMany's arrays for items.
func manyParams(items []manyItem, idempotent bool) db.JobEnqueueManyParams {
	n := len(items)
	a := db.JobEnqueueManyParams{
		OrganizationIds: make([]uuid.UUID, n), JobTypes: make([]string, n), Payloads: make([]json.RawMessage, n),
		PrioritySet: make([]bool, n), Priorities: make([]int32, n), MaxAttempts: make([]int32, n),
		TimeoutSeconds: make([]int32, n), RunAtSet: make([]bool, n), NextRunAts: make([]time.Time, n),
		IdempotencyKeys: make([]string, n), EnqueueRequests: make([]json.RawMessage, n),
		ExecutionResourceKeys: make([]string, n), Ids: make([]uuid.UUID, n), Idempotent: idempotent,
	}
	for i, it := range items {
		p := it.p
		a.OrganizationIds[i], a.JobTypes[i], a.Payloads[i], a.Ids[i] = p.OrganizationID, p.JobType, p.Payload, p.ID
		if p.Priority != nil {
			a.PrioritySet[i], a.Priorities[i] = true, *p.Priority
		}
		if p.MaxAttempts != nil {
			a.MaxAttempts[i] = *p.MaxAttempts
		}
		if p.TimeoutSeconds != nil {
			a.TimeoutSeconds[i] = *p.TimeoutSeconds
		}
		if p.NextRunAt != nil {
			a.RunAtSet[i], a.NextRunAts[i] = true, *p.NextRunAt
		}
		if p.IdempotencyKey != nil {
			a.IdempotencyKeys[i] = *p.IdempotencyKey
		}
		if p.ExecutionResourceKey != nil {
			a.ExecutionResourceKeys[i] = *p.ExecutionResourceKey
		}
		a.EnqueueRequests[i] = p.EnqueueRequest
	}
	return a
}

// enqueueManyRouted sends a bulk enqueue's inserts on Citus, where
// JobEnqueueMany runs in steps through the coordinator: b (the first round
// trip, with BEGIN in an owned session) gets each tenant's definition read
// (JobEnqueueManyDefinitionsRouted, share-locking the enabled definitions
// of its types), and is sent; then a second round trip inserts each
// tenant's requests of enabled types with their settings resolved against
// the definitions' defaults (JobEnqueueManyRouted), tenant by tenant in
// tenant order. Each statement runs in one step on the tenant's shard.
// It returns each tenant's inserted rows (nil for a tenant with nothing
// to insert).
func enqueueManyRouted(ctx context.Context, s *txn.Session, b *txn.Batch, groups [][]manyItem, idempotent bool) ([]*txn.Step[[]db.JobQueue], error) {
	defs := make([]*txn.Step[[]db.JobEnqueueManyDefinitionsRoutedRow], len(groups))
	for gi, g := range groups {
		probe, err := uuid.NewV7()
		if err != nil {
			return nil, errs.JobIDFailed.New("generate probe id: " + err.Error())
		}
		seen := map[string]bool{}
		var types []string
		for _, it := range g {
			if !seen[it.p.JobType] {
				seen[it.p.JobType] = true
				types = append(types, it.p.JobType)
			}
		}
		arg := db.JobEnqueueManyDefinitionsRoutedParams{
			JobTypes: types, OrganizationID: g[0].p.OrganizationID, ProbeID: probe, Idempotent: idempotent,
		}
		defs[gi] = txn.Queue(b, "read job definitions", func(q db.DBTX) ([]db.JobEnqueueManyDefinitionsRoutedRow, error) {
			return queries.JobEnqueueManyDefinitionsRouted(ctx, q, arg)
		})
	}
	if err := b.Send(ctx); err != nil {
		return nil, err
	}
	routed := make([]*txn.Step[[]db.JobQueue], len(groups))
	b = s.Batch(ctx)
	queued := false
	for gi, g := range groups {
		byType := map[string]db.JobEnqueueManyDefinitionsRoutedRow{}
		for _, d := range defs[gi].Val {
			byType[d.JobType] = d
		}
		var allowed []manyItem
		for _, it := range g {
			if _, ok := byType[it.p.JobType]; ok {
				allowed = append(allowed, it)
			}
		}
		if len(allowed) == 0 {
			continue
		}
		p := manyParams(allowed, idempotent)
		for i, it := range allowed {
			d := byType[it.p.JobType]
			if !p.PrioritySet[i] {
				p.Priorities[i] = d.DefaultPriority
			}
			if p.MaxAttempts[i] == 0 {
				p.MaxAttempts[i] = d.MaxAttempts
			}
			if p.TimeoutSeconds[i] == 0 {
				p.TimeoutSeconds[i] = d.DefaultTimeoutSeconds
			}
		}
		arg := db.JobEnqueueManyRoutedParams{
			JobTypes: p.JobTypes, OrganizationID: g[0].p.OrganizationID, Payloads: p.Payloads, Priorities: p.Priorities,
			MaxAttempts: p.MaxAttempts, TimeoutSeconds: p.TimeoutSeconds, RunAtSet: p.RunAtSet, NextRunAts: p.NextRunAts,
			IdempotencyKeys: p.IdempotencyKeys, EnqueueRequests: p.EnqueueRequests,
			ExecutionResourceKeys: p.ExecutionResourceKeys, Ids: p.Ids,
		}
		routed[gi] = txn.Queue(b, "enqueue jobs of one tenant", func(q db.DBTX) ([]db.JobQueue, error) {
			return queries.JobEnqueueManyRouted(ctx, q, arg)
		})
		queued = true
	}
	if queued {
		if err := b.Send(ctx); err != nil {
			return nil, err
		}
	}
	return routed, nil
}

// manyWakes returns the job types whose workers a batch wakes: each type
// with a job inserted due now, subject to wake.Due; one statement for all.
func manyWakes(inserted map[tenantID]db.JobQueue) []string {
	now := time.Now()
	seen := map[string]bool{}
	var types []string
	for _, r := range inserted {
		if seen[r.JobType] || r.NextRunAt.After(now) {
			continue
		}
		seen[r.JobType] = true
		if wake.Due(r.JobType) {
			types = append(types, r.JobType)
		}
	}
	slices.Sort(types)
	return types
}

func sameKey(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
