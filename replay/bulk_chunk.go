package replay

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/bulk"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/internal/wake"
)

// bulkOperation names a bulk chunk's transaction in error details and at
// internal/txn's failpoints.
const bulkOperation = "bulk job replay"

// bulkAction is one running Bulk: the operation's part of the engine's
// spec (internal/bulk), which does the selection, chunking, throttle,
// deadlock retry and reporting.
type bulkAction struct {
	pool *pgxpool.Pool
	req  BulkRequest
}

// chunk runs one chunk's transaction on c.Session (for a filter, its page
// is already selected in it): [BEGIN,] the lookup and lock; then the
// insert for the locked sources, the classification read of the others
// and COMMIT (not in a dry run, which End rolls back). It returns the
// results in source order and hands back the sources to replay on their
// own (the locking read passed them by, yet the unlocked read after it
// found them eligible).
func (b *bulkAction) chunk(ctx context.Context, c bulk.Call, sources []Source) (bulk.Done[Source, BulkResult], error) {
	var none bulk.Done[Source, BulkResult]
	s := c.Session
	org := rows.Tenant(b.req.Scope)
	ids := make([]uuid.UUID, len(sources))
	runs := make([]int32, len(sources))
	for i, src := range sources {
		ids[i], runs[i] = src.JobID, src.ExpectedRunNumber
	}
	bt := s.Batch(ctx)
	lock := txn.Queue(bt, "lock bulk job replay sources", func(q db.DBTX) ([]db.JobReplayBulkLockSourcesRow, error) {
		return queries.JobReplayBulkLockSources(ctx, q, db.JobReplayBulkLockSourcesParams{
			SourceJobIds: ids, SourceRunNumbers: runs, ReplayRequestKey: b.req.Key, OrganizationID: org,
		})
	})
	if err := bt.Send(ctx); err != nil {
		return none, err
	}
	if len(lock.Val) != len(sources) {
		return none, errs.Invariantf("bulk source lock returned %d rows for %d sources", len(lock.Val), len(sources))
	}
	failpoint.Inject(ctx, fpBulkAfterLock, c.Failpoint())

	results := make([]BulkResult, len(sources))
	var lockedAt, classifyAt []int
	for i, row := range lock.Val {
		src := sources[i]
		if row.SourceJobID != src.JobID || row.SourceRunNumber != src.ExpectedRunNumber {
			return none, errs.Invariant("bulk source lock returned its rows out of order")
		}
		results[i] = BulkResult{SourceJobID: src.JobID, SourceRunNumber: src.ExpectedRunNumber}
		switch {
		case row.ReplayJobID != nil:
			if row.Reason == nil || row.Locked {
				return none, errs.Invariant("bulk source lock locked a source with lineage, or returned lineage without its reason")
			}
			b.found(&results[i], *row.ReplayJobID, *row.Reason)
		case row.Locked:
			if row.JobType == nil {
				return none, errs.Invariant("bulk source lock locked a source without its job type")
			}
			lockedAt = append(lockedAt, i)
		default:
			classifyAt = append(classifyAt, i)
		}
	}

	dist, err := s.Distributed(ctx)
	if err != nil {
		return none, err
	}
	bt = s.Batch(ctx)
	var (
		insert   *txn.Step[[]db.JobReplayBulkInsertRow]
		routed   *routedCheck
		classify *txn.Step[[]db.JobGetForBulkReplayClassificationRow]
		newIDs   []uuid.UUID
	)
	if len(lockedAt) > 0 {
		lockedIDs := make([]uuid.UUID, len(lockedAt))
		lockedRuns := make([]int32, len(lockedAt))
		lockedTypes := make([]string, len(lockedAt))
		newIDs = make([]uuid.UUID, len(lockedAt))
		for k, i := range lockedAt {
			lockedIDs[k], lockedRuns[k] = ids[i], runs[i]
			if t := lock.Val[i].JobType; t != nil {
				lockedTypes[k] = *t
			}
			var err error
			if newIDs[k], err = uuid.NewV7(); err != nil {
				return none, errs.JobIDFailed.New("generate replay job id: " + err.Error())
			}
		}
		if dist {
			routed, err = b.queueRoutedCheck(ctx, bt, org, lockedIDs, lockedRuns, lockedTypes)
			if err != nil {
				return none, err
			}
		} else {
			insert = txn.Queue(bt, "record bulk job replays", func(q db.DBTX) ([]db.JobReplayBulkInsertRow, error) {
				return queries.JobReplayBulkInsert(ctx, q, db.JobReplayBulkInsertParams{
					OrganizationID: org, SourceJobIds: lockedIDs, SourceRunNumbers: lockedRuns, ReplayJobIds: newIDs,
					JobTypes: lockedTypes, ReplayRequestKey: b.req.Key, Reason: b.req.Reason,
					Operator: validate.OperatorArg(b.req.Operator),
				})
			})
			if !b.req.DryRun {
				wake.Queue(ctx, bt, distinct(lockedTypes)...)
			}
		}
	}
	if len(classifyAt) > 0 {
		classIDs := make([]uuid.UUID, len(classifyAt))
		for k, i := range classifyAt {
			classIDs[k] = ids[i]
		}
		classify = txn.Queue(bt, "read bulk job replay mismatches", func(q db.DBTX) ([]db.JobGetForBulkReplayClassificationRow, error) {
			return queries.JobGetForBulkReplayClassification(ctx, q, db.JobGetForBulkReplayClassificationParams{
				Ids: classIDs, OrganizationID: org,
			})
		})
	}
	if dist {
		// On Citus the writes are a round trip of their own, after the
		// second lookup.
		if routed != nil || classify != nil {
			if err := bt.Send(ctx); err != nil {
				return none, err
			}
		}
		bt = s.Batch(ctx)
		var write *routedWrite
		if routed != nil {
			write = b.queueRoutedWrites(ctx, bt, org, routed, newIDs)
		}
		if !c.DryRun {
			bt.Commit(ctx)
		}
		if (write != nil && write.queued) || !c.DryRun {
			if err := bt.Send(ctx); err != nil {
				return none, err
			}
		}
		if write != nil {
			insert = &txn.Step[[]db.JobReplayBulkInsertRow]{Val: write.rows()}
		}
	} else {
		if !c.DryRun {
			bt.Commit(ctx)
		}
		if insert != nil || classify != nil || !c.DryRun {
			if err := bt.Send(ctx); err != nil {
				return none, err
			}
		}
	}

	if insert != nil {
		if err := b.inserted(results, lockedAt, newIDs, insert.Val); err != nil {
			return none, err
		}
	}
	var later []bulk.Later[Source]
	if classify != nil {
		actual := make(map[uuid.UUID]db.JobGetForBulkReplayClassificationRow, len(classify.Val))
		for _, row := range classify.Val {
			actual[row.ID] = row
		}
		for _, i := range classifyAt {
			row, ok := actual[ids[i]]
			if !ok {
				results[i].Result = BulkNotFound
				continue
			}
			expected := runs[i]
			if b.req.Filter != nil && row.Status == db.JobStatusSUCCEEDED {
				// A filter's source is replayed at the run it has when
				// locked: try again at the run it has now.
				expected = row.RunNumber
			}
			switch {
			case row.Status != db.JobStatusSUCCEEDED || row.RunNumber != expected:
				results[i].Result = BulkMismatch
			case row.WorkflowManaged:
				results[i].Result = BulkWorkflowManaged
			default:
				later = append(later, bulk.Later[Source]{Index: i, Source: Source{JobID: ids[i], ExpectedRunNumber: expected}})
			}
		}
	}
	return bulk.Done[Source, BulkResult]{Results: results, Later: later}, nil
}

// routedCheck is a chunk's second lookup on Citus, where
// JobReplayBulkInsert runs in steps through the coordinator: the enabled
// definitions of the locked sources' types, share-locked in type order
// (JobEnqueueManyDefinitionsRouted), then the lineage committed since the
// lock and what each source's replay copies (JobReplayBulkSourcesRouted),
// queued in the chunk's second round trip; each statement one step on the
// tenant's shard.
type routedCheck struct {
	defs    *txn.Step[[]db.JobEnqueueManyDefinitionsRoutedRow]
	sources *txn.Step[[]db.JobReplayBulkSourcesRoutedRow]
	n       int
}

func (b *bulkAction) queueRoutedCheck(ctx context.Context, bt *txn.Batch, org uuid.UUID, ids []uuid.UUID, runs []int32, types []string) (*routedCheck, error) {
	probe, err := uuid.NewV7()
	if err != nil {
		return nil, errs.JobIDFailed.New("generate probe id: " + err.Error())
	}
	sorted := distinct(types)
	slices.Sort(sorted)
	r := &routedCheck{n: len(ids)}
	r.defs = txn.Queue(bt, "read bulk job replay definitions", func(q db.DBTX) ([]db.JobEnqueueManyDefinitionsRoutedRow, error) {
		return queries.JobEnqueueManyDefinitionsRouted(ctx, q, db.JobEnqueueManyDefinitionsRoutedParams{
			JobTypes: sorted, OrganizationID: org, ProbeID: probe,
		})
	})
	r.sources = txn.Queue(bt, "load existing bulk job replays", func(q db.DBTX) ([]db.JobReplayBulkSourcesRoutedRow, error) {
		return queries.JobReplayBulkSourcesRouted(ctx, q, db.JobReplayBulkSourcesRoutedParams{
			OrganizationID: org, SourceJobIds: ids, SourceRunNumbers: runs, ReplayRequestKey: b.req.Key,
		})
	})
	return r, nil
}

// routedWrite is the writes of a chunk on Citus: the replay jobs of the
// locked sources without lineage whose definition is enabled
// (JobReplayBulkJobsRouted), their events (JobEventReplayEnqueuedMany) and
// their lineage (JobReplayBulkLineageRouted), each one step on the
// tenant's shard, and the workers' wake-up, in the chunk's last round
// trip.
type routedWrite struct {
	check   *routedCheck
	write   []bool // by locked source: a replay is written
	queued  bool
	jobs    *txn.Step[[]db.JobReplayBulkJobsRoutedRow]
	events  *txn.Step[int64]
	lineage *txn.Step[int64]
}

func (b *bulkAction) queueRoutedWrites(ctx context.Context, bt *txn.Batch, org uuid.UUID, r *routedCheck, newIDs []uuid.UUID) *routedWrite {
	w := &routedWrite{check: r, write: make([]bool, r.n)}
	enabled := map[string]bool{}
	for _, d := range r.defs.Val {
		enabled[d.JobType] = true
	}
	var jobs db.JobReplayBulkJobsRoutedParams
	var events db.JobEventReplayEnqueuedManyParams
	var lineage db.JobReplayBulkLineageRoutedParams
	for k, src := range r.sources.Val {
		if k >= len(newIDs) || src.ExistingReplayJobID != nil || !enabled[src.JobType] {
			continue
		}
		w.write[k] = true
		key := ""
		if src.ExecutionResourceKey != nil {
			key = *src.ExecutionResourceKey
		}
		jobs.ReplayJobIds = append(jobs.ReplayJobIds, newIDs[k])
		jobs.JobTypes = append(jobs.JobTypes, src.JobType)
		jobs.Payloads = append(jobs.Payloads, src.Payload)
		jobs.Priorities = append(jobs.Priorities, src.Priority)
		jobs.MaxAttempts = append(jobs.MaxAttempts, src.MaxAttempts)
		jobs.TimeoutSeconds = append(jobs.TimeoutSeconds, src.TimeoutSeconds)
		jobs.ExecutionResourceKeys = append(jobs.ExecutionResourceKeys, key)
		events.ReplayJobIds = append(events.ReplayJobIds, newIDs[k])
		events.JobTypes = append(events.JobTypes, src.JobType)
		events.SourceJobIds = append(events.SourceJobIds, src.SourceJobID)
		events.SourceRunNumbers = append(events.SourceRunNumbers, src.SourceRunNumber)
		lineage.ReplayJobIds = append(lineage.ReplayJobIds, newIDs[k])
		lineage.SourceJobIds = append(lineage.SourceJobIds, src.SourceJobID)
		lineage.SourceRunNumbers = append(lineage.SourceRunNumbers, src.SourceRunNumber)
	}
	if len(jobs.ReplayJobIds) == 0 {
		return w
	}
	w.queued = true
	jobs.OrganizationID = org
	events.OrganizationID, events.ReplayRequestKey, events.Reason = org, b.req.Key, b.req.Reason
	events.Operator = validate.OperatorArg(b.req.Operator)
	lineage.OrganizationID, lineage.ReplayRequestKey, lineage.Reason = org, b.req.Key, b.req.Reason
	w.jobs = txn.Queue(bt, "record bulk job replays", func(q db.DBTX) ([]db.JobReplayBulkJobsRoutedRow, error) {
		return queries.JobReplayBulkJobsRouted(ctx, q, jobs)
	})
	w.events = txn.Queue(bt, "record bulk job replay events", func(q db.DBTX) (int64, error) {
		return queries.JobEventReplayEnqueuedMany(ctx, q, events)
	})
	w.lineage = txn.Queue(bt, "record bulk job replay lineage", func(q db.DBTX) (int64, error) {
		return queries.JobReplayBulkLineageRouted(ctx, q, lineage)
	})
	if !b.req.DryRun {
		wake.Queue(ctx, bt, distinct(jobs.JobTypes)...)
	}
	return w
}

// rows are the rows JobReplayBulkInsert would have returned, for inserted
// to check: one per locked source, in order.
func (w *routedWrite) rows() []db.JobReplayBulkInsertRow {
	var inserted, pending, events, lineage int64
	if w.queued {
		inserted, events, lineage = int64(len(w.jobs.Val)), w.events.Val, w.lineage.Val
		for _, j := range w.jobs.Val {
			if j.Status == db.JobStatusPENDING && j.RunNumber == 1 && j.Stage == string(runledger.JobStageQueued) {
				pending++
			}
		}
	}
	out := make([]db.JobReplayBulkInsertRow, len(w.check.sources.Val))
	for k, src := range w.check.sources.Val {
		out[k] = db.JobReplayBulkInsertRow{
			SourceJobID: src.SourceJobID, SourceRunNumber: src.SourceRunNumber,
			ExistingReplayJobID: src.ExistingReplayJobID, ExistingReason: src.ExistingReason,
			Inserted: w.write[k], InsertedCount: inserted, PendingCount: pending, EventCount: events, LineageCount: lineage,
		}
	}
	return out
}

// keyset is the filter's page function (bulk.Keyset): the succeeded jobs
// of the filter's type in the request's scope after the cursor, in finish
// order, without the replays made under the request's key.
func (b *bulkAction) keyset() bulk.Keyset[Source, db.JobListSucceededForReplayRow] {
	f := b.req.Filter
	return bulk.Keyset[Source, db.JobListSucceededForReplayRow]{
		Noun: "bulk job replay",
		Count: func(ctx context.Context, q db.DBTX, until *time.Time) (int, error) {
			return countSelection(ctx, q, b.req, until)
		},
		Select: func(ctx context.Context, q db.DBTX, afterAt *time.Time, afterID *uuid.UUID, until *time.Time, max int32) ([]db.JobListSucceededForReplayRow, error) {
			return queries.JobListSucceededForReplay(ctx, q, db.JobListSucceededForReplayParams{
				JobType: f.JobType, OrganizationID: rows.Tenant(b.req.Scope), Since: f.SucceededSince, Until: until,
				AfterFinishedAt: afterAt, AfterID: afterID, ReplayRequestKey: b.req.Key, MaxJobs: max,
			})
		},
		Source: func(r db.JobListSucceededForReplayRow) (Source, bulk.Cursor, time.Time) {
			return Source{JobID: r.ID, ExpectedRunNumber: r.RunNumber}, bulk.Cursor{At: r.FinishedAt, ID: r.ID}, r.SelectionUntil
		},
	}
}

// countSelection counts the request's filter selection from the start,
// at most its Limit, below until (nil: now()) on q.
func countSelection(ctx context.Context, q db.DBTX, req BulkRequest, until *time.Time) (int, error) {
	f := req.Filter
	n, err := queries.JobCountSucceededForReplay(ctx, q, db.JobCountSucceededForReplayParams{
		JobType: f.JobType, OrganizationID: rows.Tenant(req.Scope), Since: f.SucceededSince, Until: until,
		ReplayRequestKey: req.Key, MaxJobs: bulk.MaxJobs(f.Limit),
	})
	return int(n), err
}

// distinct returns the strings of ss once each, in order.
func distinct(ss []string) []string {
	var out []string
	seen := make(map[string]bool, len(ss))
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// found sets the result of a source whose lineage was found: existing when
// its reason is the request's, a conflict otherwise.
func (b *bulkAction) found(r *BulkResult, replayID uuid.UUID, reason string) {
	if reason != b.req.Reason {
		r.Result = BulkConflict
		return
	}
	id := replayID
	r.Result, r.ReplayJobID = BulkExisting, &id
}

// inserted sets the results of the locked sources from the insert's rows
// (one per locked source, in order) and checks what was written.
func (b *bulkAction) inserted(results []BulkResult, lockedAt []int, newIDs []uuid.UUID, inserts []db.JobReplayBulkInsertRow) error {
	if len(inserts) != len(lockedAt) {
		return errs.Invariantf("bulk replay insert returned %d rows for %d locked sources", len(inserts), len(lockedAt))
	}
	n := int64(0)
	for k, row := range inserts {
		r := &results[lockedAt[k]]
		switch {
		case row.SourceJobID != r.SourceJobID || row.SourceRunNumber != r.SourceRunNumber:
			return errs.Invariant("bulk replay insert returned its rows out of order")
		case row.ExistingReplayJobID != nil:
			if row.ExistingReason == nil || row.Inserted {
				return errs.Invariant("bulk replay insert wrote a replay although the second lookup found lineage")
			}
			b.found(r, *row.ExistingReplayJobID, *row.ExistingReason)
		case row.Inserted:
			n++
			id := newIDs[k]
			r.Result, r.ReplayJobID = BulkInserted, &id
		default:
			// Nothing was written: the definition is missing or disabled.
			r.Result = BulkDefinitionUnavailable
		}
	}
	if first := inserts[0]; first.InsertedCount != n || first.PendingCount != n || first.EventCount != n || first.LineageCount != n {
		return errs.Invariantf("bulk replay insert wrote %d jobs (%d PENDING at run 1, queued), %d events and %d lineage rows for %d replays",
			first.InsertedCount, first.PendingCount, first.EventCount, first.LineageCount, n)
	}
	return nil
}

// single replays one source on its own with the single replay's lock loop
// (in a transaction that rolls back, in a dry run) and turns its verdict
// into a result.
func (b *bulkAction) single(ctx context.Context, src Source) (BulkResult, error) {
	req := Request{Scope: b.req.Scope, SourceJobID: src.JobID, ExpectedRunNumber: src.ExpectedRunNumber, Key: b.req.Key, Reason: b.req.Reason, Operator: b.req.Operator}
	out, err := bulk.Alone(ctx, b.pool, b.req.DryRun, bulkOperation,
		func(ctx context.Context) (Outcome, error) { return SucceededJob(ctx, b.pool, req) },
		func(ctx context.Context, tx pgx.Tx) (Outcome, error) { return run(ctx, txn.Join(tx, txOperation), req) })
	r := BulkResult{SourceJobID: src.JobID, SourceRunNumber: src.ExpectedRunNumber}
	switch {
	case errors.Is(err, runledger.CodeReplayIdempotencyConflict):
		r.Result = BulkConflict
	case errors.Is(err, runledger.CodeWorkflowManaged):
		r.Result = BulkWorkflowManaged
	case errors.Is(err, runledger.CodeDefinitionNotFoundOrDisabled):
		r.Result = BulkDefinitionUnavailable
	case err != nil:
		return BulkResult{}, err
	default:
		switch o := out.(type) {
		case Replayed:
			id := o.Replay.JobID
			r.ReplayJobID = &id
			r.Result = BulkExisting
			if o.Disposition == runledger.DispositionInserted {
				r.Result = BulkInserted
			}
		case ExpectationMismatch:
			r.Result = BulkMismatch
		case NotFound:
			r.Result = BulkNotFound
		default:
			return BulkResult{}, errs.Invariant("single replay returned no outcome")
		}
	}
	return r, nil
}
