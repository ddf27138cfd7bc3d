package requeue

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/bulk"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/internal/wake"
)

// bulkOperation names a bulk chunk's transaction in error details and at
// internal/txn's failpoints.
const bulkOperation = "bulk job requeue"

// bulkAction is one running Bulk: the operation's part of the engine's
// spec (internal/bulk), which does the selection, chunking, throttle,
// deadlock retry and reporting.
type bulkAction struct {
	pool *pgxpool.Pool
	req  BulkRequest
}

// chunk runs one chunk's transaction on c.Session (for a filter, its page
// is already selected in it) in two round trips: [BEGIN,] the locking
// update of the requeueable jobs with their events; then the
// classification read of the jobs it did not requeue (none, usually), the
// wake-up and COMMIT (not in a dry run, which End rolls back, and where
// the second round trip is sent only for a classification). It returns the results in
// source order and hands back the jobs to requeue on their own (the
// locking update passed them by, yet the unlocked read after it found
// them requeueable).
func (b *bulkAction) chunk(ctx context.Context, c bulk.Call, sources []Source) (bulk.Done[Source, BulkResult], error) {
	var none bulk.Done[Source, BulkResult]
	s := c.Session
	org := rows.Tenant(b.req.Scope)
	ids := make([]uuid.UUID, len(sources))
	statuses := make([]string, len(sources))
	runs := make([]int32, len(sources))
	seen := make(map[uuid.UUID]struct{}, len(sources))
	for i, src := range sources {
		if _, dup := seen[src.JobID]; dup {
			return none, errBulkDuplicate.Newf("bulk requeue job stream names job %s twice in chunk %d", src.JobID, c.Index+1)
		}
		seen[src.JobID] = struct{}{}
		if err := src.ExpectedStatus.validate(); err != nil {
			return none, err
		}
		ids[i], statuses[i], runs[i] = src.JobID, string(src.ExpectedStatus), src.ExpectedRunNumber
	}

	bt := s.Batch(ctx)
	update := txn.Queue(bt, "requeue bulk jobs", func(q db.DBTX) ([]db.JobRequeueBulkRow, error) {
		return queries.JobRequeueBulk(ctx, q, db.JobRequeueBulkParams{
			OrganizationID: org, Ids: ids, ExpectedStatuses: statuses, ExpectedRunNumbers: runs,
			ResetProgress: b.req.StatePolicy == ResetProgress, Reason: b.req.Reason, StatePolicy: b.req.StatePolicy.String(),
			Operator: validate.OperatorArg(b.req.Operator),
		})
	})
	if err := bt.Send(ctx); err != nil {
		return none, err
	}
	failpoint.Inject(ctx, fpBulkAfterRequeue, c.Failpoint())
	requeuedIDs := make(map[uuid.UUID]struct{}, len(update.Val))
	for _, row := range update.Val {
		requeuedIDs[row.ID] = struct{}{}
	}
	var missIDs []uuid.UUID
	var missStatuses []string
	var missRuns []int32
	for i, id := range ids {
		if _, ok := requeuedIDs[id]; !ok {
			missIDs, missStatuses, missRuns = append(missIDs, id), append(missStatuses, statuses[i]), append(missRuns, runs[i])
		}
	}

	bt = s.Batch(ctx)
	classify := &txn.Step[[]db.JobGetForBulkRequeueClassificationRow]{}
	if len(missIDs) > 0 {
		classify = txn.Queue(bt, "read bulk job requeue mismatches", func(q db.DBTX) ([]db.JobGetForBulkRequeueClassificationRow, error) {
			return queries.JobGetForBulkRequeueClassification(ctx, q, db.JobGetForBulkRequeueClassificationParams{
				OrganizationID: org, Ids: missIDs, ExpectedStatuses: missStatuses, ExpectedRunNumbers: missRuns,
			})
		})
	}
	if !c.DryRun {
		if len(update.Val) > 0 {
			wake.Queue(ctx, bt, "")
		}
		bt.Commit(ctx)
	}
	if len(missIDs) > 0 || !c.DryRun {
		if err := bt.Send(ctx); err != nil {
			return none, err
		}
	}

	requeued := make(map[uuid.UUID]int32, len(update.Val))
	for _, row := range update.Val {
		requeued[row.ID] = row.RunNumber
	}
	if n := len(update.Val); n > 0 && update.Val[0].EventCount != int64(n) {
		return none, errs.Invariantf("bulk requeue wrote %d events for %d jobs", update.Val[0].EventCount, n)
	}
	actual := make(map[uuid.UUID]db.JobGetForBulkRequeueClassificationRow, len(classify.Val))
	for _, row := range classify.Val {
		actual[row.ID] = row
	}
	results := make([]BulkResult, len(sources))
	var later []bulk.Later[Source]
	for i, src := range sources {
		r := &results[i]
		*r = BulkResult{JobID: src.JobID, RunNumber: src.ExpectedRunNumber}
		if run, ok := requeued[src.JobID]; ok {
			if run != src.ExpectedRunNumber+1 {
				return none, errs.Invariantf("bulk requeue moved job %s to run %d from run %d", src.JobID, run, src.ExpectedRunNumber)
			}
			r.Result = BulkRequeued
			delete(requeued, src.JobID)
			continue
		}
		row, ok := actual[src.JobID]
		if !ok {
			r.Result = BulkNotFound
			continue
		}
		switch {
		case string(row.Status) == string(src.ExpectedStatus) && row.RunNumber == src.ExpectedRunNumber:
			switch {
			case row.WorkflowManaged:
				r.Result = BulkWorkflowManaged
			case row.LeaseLive:
				r.Result = BulkNotQuiesced
			default:
				later = append(later, bulk.Later[Source]{Index: i, Source: src})
			}
		case row.RequeuedReason != nil && *row.RequeuedReason == b.req.Reason &&
			(row.RequeuedFrom == nil || *row.RequeuedFrom == string(src.ExpectedStatus)):
			r.Result = BulkExisting
		case b.req.Filter != nil && string(row.Status) == string(src.ExpectedStatus):
			// A filter's job is requeued at the run it has in its chunk:
			// it moved on to another run since its page was selected; try
			// again at the run it has now.
			later = append(later, bulk.Later[Source]{Index: i, Source: Source{JobID: src.JobID, ExpectedStatus: src.ExpectedStatus, ExpectedRunNumber: row.RunNumber}})
		default:
			r.Result = BulkMismatch
		}
	}
	if len(requeued) > 0 {
		return none, errs.Invariantf("bulk requeue requeued %d jobs not in its chunk", len(requeued))
	}
	return bulk.Done[Source, BulkResult]{Results: results, Later: later}, nil
}

// page selects a filter's next page (at most q.Max jobs after q.After,
// below q.Until or, on the first page of an open-ended filter, below
// now(), which it returns) in the session's transaction, in one round
// trip with BEGIN; on the first page with q.Count, the count of the whole
// selection under the same bound rides the same round trip.
func (b *bulkAction) page(ctx context.Context, s *txn.Session, q bulk.PageQuery) (bulk.Page[Source], error) {
	f := b.req.Filter
	var page bulk.Page[Source]
	var afterAt *time.Time
	var afterID *uuid.UUID
	if q.After != nil {
		at, id := q.After.At, q.After.ID
		afterAt, afterID = &at, &id
	}
	bt := s.Batch(ctx)
	var count *txn.Step[int]
	if q.Count {
		count = txn.Queue(bt, "count bulk job requeue sources", func(d db.DBTX) (int, error) {
			return countSelection(ctx, d, b.req, q.Until)
		})
	}
	st := txn.Queue(bt, "select bulk job requeue sources", func(d db.DBTX) ([]db.JobListFinishedForRequeueRow, error) {
		return queries.JobListFinishedForRequeue(ctx, d, db.JobListFinishedForRequeueParams{
			OrganizationID: rows.Tenant(b.req.Scope), Status: db.JobStatus(f.Status), JobType: optional(f.JobType),
			ErrorCode: optional(f.ErrorCode), Since: f.FinishedSince, Until: q.Until,
			AfterFinishedAt: afterAt, AfterID: afterID, MaxJobs: int32(q.Max),
		})
	})
	if err := bt.Send(ctx); err != nil {
		return page, err
	}
	if count != nil {
		page.Count, page.Counted = count.Val, true
	}
	page.Sources = make([]Source, 0, len(st.Val))
	for _, r := range st.Val {
		page.Sources = append(page.Sources, Source{JobID: r.ID, ExpectedStatus: Status(r.Status), ExpectedRunNumber: r.RunNumber})
		page.Next = bulk.Cursor{At: r.FinishedAt, ID: r.ID}
		page.Until = r.SelectionUntil
	}
	return page, nil
}

// single requeues one job on its own with the single requeue's lock loop
// (in a transaction that rolls back, in a dry run) and turns its verdict
// into a result.
func (b *bulkAction) single(ctx context.Context, src Source) (BulkResult, error) {
	req := Request{Scope: b.req.Scope, JobID: src.JobID, ExpectedStatus: src.ExpectedStatus, ExpectedRunNumber: src.ExpectedRunNumber,
		StatePolicy: b.req.StatePolicy, Reason: b.req.Reason}
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
		out, err = Job(ctx, b.pool, req)
	}
	r := BulkResult{JobID: src.JobID, RunNumber: src.ExpectedRunNumber}
	switch {
	case errors.Is(err, runledger.CodeWorkflowManaged):
		r.Result = BulkWorkflowManaged
	case err != nil:
		return BulkResult{}, err
	default:
		switch o := out.(type) {
		case Requeued:
			r.Result = BulkExisting
			if o.Disposition == runledger.DispositionInserted {
				r.Result = BulkRequeued
			}
		case ExpectationMismatch:
			r.Result = BulkMismatch
		case NotQuiesced:
			r.Result = BulkNotQuiesced
		case NotFound:
			r.Result = BulkNotFound
		default:
			return BulkResult{}, errs.Invariant("single requeue returned no outcome")
		}
	}
	return r, nil
}
