package replay

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/txn"
)

// bulkOperation names a bulk chunk's transaction in error details and at
// internal/txn's failpoints.
const bulkOperation = "bulk job replay"

// bulkDeadlockAttempts bounds how often a chunk runs when it fails with a
// deadlock.
const bulkDeadlockAttempts = 3

// bulk is one running action.
type bulk struct {
	pool    *pgxpool.Pool
	req     BulkRequest
	start   time.Time
	onChunk func(BulkChunk) error
	total   BulkSummary
	index   int
}

// cursor is where a filter's next page starts: after the last source
// selected (nil before the first page).
type cursor struct {
	finishedAt *time.Time
	id         *uuid.UUID
}

// retrySource is a source of a chunk to replay on its own after the
// chunk's transaction: the locking read passed it by, yet the unlocked
// read after it found it eligible.
type retrySource struct {
	index int // in the chunk's results
	src   Source
}

func (b *bulk) byList(ctx context.Context) (BulkSummary, error) {
	n := b.req.chunkSize()
	for i := 0; i < len(b.req.Sources); i += n {
		chunk := b.req.Sources[i:min(i+n, len(b.req.Sources))]
		if _, _, err := b.chunk(ctx, chunk, cursor{}); err != nil {
			return b.total, err
		}
	}
	return b.total, nil
}

func (b *bulk) byFilter(ctx context.Context) (BulkSummary, error) {
	n := b.req.chunkSize()
	remaining := b.req.Filter.Limit
	var after cursor
	for {
		size := n
		if b.req.Filter.Limit > 0 {
			if remaining == 0 {
				break
			}
			size = min(size, remaining)
		}
		page := make([]Source, 0, size) // the chunk fills it
		got, next, err := b.chunk(ctx, page, after)
		if err != nil {
			return b.total, err
		}
		remaining -= got
		if got < size {
			break
		}
		after = next
	}
	return b.total, nil
}

// chunk runs one chunk, reports it and returns the number of sources it
// held. For a filter, sources is an empty slice whose capacity is the page
// size, after the page's cursor; the chunk selects its sources first.
func (b *bulk) chunk(ctx context.Context, sources []Source, after cursor) (int, cursor, error) {
	if err := ctx.Err(); err != nil {
		return 0, after, dberr.Translate(ctx, bulkOperation, err)
	}
	if err := b.throttle(ctx); err != nil {
		return 0, after, err
	}
	var (
		results []BulkResult
		retry   []retrySource
		next    cursor
		err     error
	)
	for attempt := 1; ; attempt++ {
		results, retry, next, err = b.runChunk(ctx, sources, after)
		var re *runledger.Error
		if err == nil || attempt == bulkDeadlockAttempts || !errors.As(err, &re) || re.SQLState != "40P01" {
			break
		}
	}
	if err != nil {
		return 0, after, err
	}
	if len(results) == 0 {
		return 0, after, nil
	}
	for _, r := range retry {
		res, err := b.single(ctx, r.src)
		if err != nil {
			return 0, after, err
		}
		results[r.index] = res
	}
	for _, r := range results {
		b.total.add(r.Result)
	}
	c := BulkChunk{Index: b.index, Results: results, Total: b.total, Elapsed: time.Since(b.start)}
	b.index++
	if b.onChunk != nil {
		if err := b.onChunk(c); err != nil {
			return len(results), next, err
		}
	}
	failpoint.Inject(ctx, fpBulkAfterChunk, bulkCall{Key: b.req.Key, Chunk: c.Index})
	return len(results), next, nil
}

// throttle waits, when the request sets a rate, until the replays inserted
// so far are within it. A dry run inserts nothing and is not throttled.
func (b *bulk) throttle(ctx context.Context) error {
	if b.req.Rate <= 0 || b.total.Inserted == 0 || b.req.DryRun {
		return nil
	}
	due := b.start.Add(time.Duration(float64(b.total.Inserted) / float64(b.req.Rate) * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return dberr.Translate(ctx, bulkOperation, ctx.Err())
	case <-t.C:
		return nil
	}
}

// runChunk runs one chunk's transaction: for a filter, BEGIN and the page
// selection; then [BEGIN,] the lookup and lock; then the insert for the
// locked sources, the classification read of the others and COMMIT (not
// in a dry run, which End rolls back). It returns the results in source
// order, the sources to replay on their own, and the filter's next cursor.
func (b *bulk) runChunk(ctx context.Context, sources []Source, after cursor) ([]BulkResult, []retrySource, cursor, error) {
	s, err := txn.Own(ctx, b.pool, bulkOperation)
	if err != nil {
		return nil, nil, after, err
	}
	defer s.End(ctx)
	org := b.req.Scope.OrganizationIDPtr()
	next := after
	if b.req.Filter != nil {
		sources, next, err = b.selectPage(ctx, s, sources[:0], after)
		if err != nil || len(sources) == 0 {
			return nil, nil, after, err
		}
		failpoint.Inject(ctx, fpBulkAfterSelect, bulkCall{Key: b.req.Key, Chunk: b.index})
	}

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
		return nil, nil, after, err
	}
	if len(lock.Val) != len(sources) {
		return nil, nil, after, errs.Invariantf("bulk source lock returned %d rows for %d sources", len(lock.Val), len(sources))
	}
	failpoint.Inject(ctx, fpBulkAfterLock, bulkCall{Key: b.req.Key, Chunk: b.index})

	results := make([]BulkResult, len(sources))
	var lockedAt, classifyAt []int
	for i, row := range lock.Val {
		src := sources[i]
		if row.SourceJobID != src.JobID || row.SourceRunNumber != src.ExpectedRunNumber {
			return nil, nil, after, errs.Invariant("bulk source lock returned its rows out of order")
		}
		results[i] = BulkResult{SourceJobID: src.JobID, SourceRunNumber: src.ExpectedRunNumber}
		switch {
		case row.ReplayJobID != nil:
			if row.Reason == nil || row.Locked {
				return nil, nil, after, errs.Invariant("bulk source lock locked a source with lineage, or returned lineage without its reason")
			}
			b.found(&results[i], *row.ReplayJobID, *row.Reason)
		case row.Locked:
			lockedAt = append(lockedAt, i)
		default:
			classifyAt = append(classifyAt, i)
		}
	}

	bt = s.Batch(ctx)
	var (
		insert   *txn.Step[[]db.JobReplayBulkInsertRow]
		classify *txn.Step[[]db.JobGetForBulkReplayClassificationRow]
		newIDs   []uuid.UUID
	)
	if len(lockedAt) > 0 {
		lockedIDs := make([]uuid.UUID, len(lockedAt))
		lockedRuns := make([]int32, len(lockedAt))
		newIDs = make([]uuid.UUID, len(lockedAt))
		for k, i := range lockedAt {
			lockedIDs[k], lockedRuns[k] = ids[i], runs[i]
			if newIDs[k], err = uuid.NewV7(); err != nil {
				return nil, nil, after, errs.JobIDFailed.New("generate replay job id: " + err.Error())
			}
		}
		insert = txn.Queue(bt, "record bulk job replays", func(q db.DBTX) ([]db.JobReplayBulkInsertRow, error) {
			return queries.JobReplayBulkInsert(ctx, q, db.JobReplayBulkInsertParams{
				SourceJobIds: lockedIDs, SourceRunNumbers: lockedRuns, ReplayJobIds: newIDs,
				ReplayRequestKey: b.req.Key, Reason: b.req.Reason,
			})
		})
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
	if !b.req.DryRun {
		bt.Commit(ctx)
	}
	if insert != nil || classify != nil || !b.req.DryRun {
		if err := bt.Send(ctx); err != nil {
			return nil, nil, after, err
		}
	}

	if insert != nil {
		if err := b.inserted(results, lockedAt, newIDs, insert.Val); err != nil {
			return nil, nil, after, err
		}
	}
	var retry []retrySource
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
				retry = append(retry, retrySource{index: i, src: Source{JobID: ids[i], ExpectedRunNumber: expected}})
			}
		}
	}
	return results, retry, next, nil
}

// selectPage selects a filter's next page of sources into page (up to its
// capacity) in the session's transaction, and returns it with the cursor
// after it.
func (b *bulk) selectPage(ctx context.Context, s *txn.Session, page []Source, after cursor) ([]Source, cursor, error) {
	f := b.req.Filter
	max := int32(cap(page))
	bt := s.Batch(ctx)
	// Both scopes' statements return the same columns; each has its own
	// statement so that it matches its index.
	st := txn.Queue(bt, "select bulk job replay sources", func(q db.DBTX) ([]pageRow, error) {
		var out []pageRow
		if org := b.req.Scope.OrganizationIDPtr(); org != nil {
			rs, err := queries.JobListSucceededForReplayOrg(ctx, q, db.JobListSucceededForReplayOrgParams{
				JobType: f.JobType, OrganizationID: org, Since: f.SucceededSince, Until: f.SucceededUntil,
				AfterFinishedAt: after.finishedAt, AfterID: after.id, ReplayRequestKey: b.req.Key, MaxJobs: max,
			})
			for _, r := range rs {
				out = append(out, pageRow{r.ID, r.RunNumber, r.FinishedAt})
			}
			return out, err
		}
		rs, err := queries.JobListSucceededForReplayGlobal(ctx, q, db.JobListSucceededForReplayGlobalParams{
			JobType: f.JobType, Since: f.SucceededSince, Until: f.SucceededUntil,
			AfterFinishedAt: after.finishedAt, AfterID: after.id, ReplayRequestKey: b.req.Key, MaxJobs: max,
		})
		for _, r := range rs {
			out = append(out, pageRow{r.ID, r.RunNumber, r.FinishedAt})
		}
		return out, err
	})
	if err := bt.Send(ctx); err != nil {
		return nil, after, err
	}
	for _, r := range st.Val {
		page = append(page, Source{JobID: r.id, ExpectedRunNumber: r.run})
		after = cursor{finishedAt: &r.finishedAt, id: &r.id}
	}
	return page, after, nil
}

// pageRow is one source a filter page selected.
type pageRow struct {
	id         uuid.UUID
	run        int32
	finishedAt time.Time
}

// found sets the result of a source whose lineage was found: existing when
// its reason is the request's, a conflict otherwise.
func (b *bulk) found(r *BulkResult, replayID uuid.UUID, reason string) {
	if reason != b.req.Reason {
		r.Result = BulkConflict
		return
	}
	id := replayID
	r.Result, r.ReplayJobID = BulkExisting, &id
}

// inserted sets the results of the locked sources from the insert's rows
// (one per locked source, in order) and checks what was written.
func (b *bulk) inserted(results []BulkResult, lockedAt []int, newIDs []uuid.UUID, rows []db.JobReplayBulkInsertRow) error {
	if len(rows) != len(lockedAt) {
		return errs.Invariantf("bulk replay insert returned %d rows for %d locked sources", len(rows), len(lockedAt))
	}
	n := int64(0)
	for k, row := range rows {
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
	if first := rows[0]; first.InsertedCount != n || first.PendingCount != n || first.EventCount != n || first.LineageCount != n {
		return errs.Invariantf("bulk replay insert wrote %d jobs (%d PENDING at run 1, queued), %d events and %d lineage rows for %d replays",
			first.InsertedCount, first.PendingCount, first.EventCount, first.LineageCount, n)
	}
	return nil
}

// single replays one source on its own with the single replay's lock loop
// (in a transaction that rolls back, in a dry run) and turns its verdict
// into a result.
func (b *bulk) single(ctx context.Context, src Source) (BulkResult, error) {
	req := Request{Scope: b.req.Scope, SourceJobID: src.JobID, ExpectedRunNumber: src.ExpectedRunNumber, Key: b.req.Key, Reason: b.req.Reason}
	var (
		out Outcome
		err error
	)
	if b.req.DryRun {
		tx, berr := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if berr != nil {
			return BulkResult{}, dberr.Translate(ctx, "begin "+bulkOperation+" transaction", berr)
		}
		out, err = run(ctx, txn.Join(tx, txOperation), req)
		txn.Rollback(ctx, tx)
	} else {
		out, err = SucceededJob(ctx, b.pool, req)
	}
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
