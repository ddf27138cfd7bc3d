package requeue

import (
	"bytes"
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
	for i, src := range sources {
		ids[i], statuses[i], runs[i] = src.JobID, string(src.ExpectedStatus), src.ExpectedRunNumber
	}

	dist, err := s.Distributed(ctx)
	if err != nil {
		return none, err
	}
	params := db.JobRequeueBulkParams{
		OrganizationID: org, Ids: ids, ExpectedStatuses: statuses, ExpectedRunNumbers: runs,
		ResetProgress: b.req.StatePolicy == ResetProgress, Reason: b.req.Reason, StatePolicy: b.req.StatePolicy.String(),
		Operator: validate.OperatorArg(b.req.Operator),
	}
	bt := s.Batch(ctx)
	var update *txn.Step[[]db.JobRequeueBulkRow]
	var routed *txn.Step[[]db.JobRequeueBulkRoutedRow]
	if dist {
		// On Citus the requeue and its events are two statements, each run
		// in one step on the tenant's shard: the events go with the second
		// round trip, from the rows the update returned.
		routed = txn.Queue(bt, "requeue bulk jobs", func(q db.DBTX) ([]db.JobRequeueBulkRoutedRow, error) {
			return queries.JobRequeueBulkRouted(ctx, q, db.JobRequeueBulkRoutedParams{
				ResetProgress: params.ResetProgress, Reason: params.Reason, OrganizationID: org, Ids: ids,
				ExpectedRunNumbers: runs, ExpectedStatuses: statuses,
			})
		})
	} else {
		update = txn.Queue(bt, "requeue bulk jobs", func(q db.DBTX) ([]db.JobRequeueBulkRow, error) {
			return queries.JobRequeueBulk(ctx, q, params)
		})
	}
	if err := bt.Send(ctx); err != nil {
		return none, err
	}
	var events *db.JobEventRequeuedManyParams
	if dist {
		update = &txn.Step[[]db.JobRequeueBulkRow]{}
		rs := slices.Clone(routed.Val)
		slices.SortFunc(rs, func(a, b db.JobRequeueBulkRoutedRow) int { return bytes.Compare(a.ID[:], b.ID[:]) })
		if len(rs) > 0 {
			events = &db.JobEventRequeuedManyParams{
				OrganizationID: org, Reason: params.Reason, StatePolicy: params.StatePolicy, Operator: params.Operator,
			}
		}
		for _, r := range rs {
			update.Val = append(update.Val, db.JobRequeueBulkRow{
				ID: r.ID, RunNumber: r.RunNumber, Status: r.Status, JobType: r.JobType, EventCount: int64(len(rs)),
			})
			events.Ids = append(events.Ids, r.ID)
			events.RunNumbers = append(events.RunNumbers, r.RunNumber-1)
			events.Attempts = append(events.Attempts, r.BeforeAttempt)
		}
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
	if events != nil && !c.DryRun {
		txn.Queue(bt, "record the requeued events", func(q db.DBTX) (struct{}, error) {
			return struct{}{}, queries.JobEventRequeuedMany(ctx, q, *events)
		})
	}
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

// keyset is the filter's page function (bulk.Keyset): the jobs in the
// filter's status (and type, and last error code) in the request's scope
// after the cursor, in finish order.
func (b *bulkAction) keyset() bulk.Keyset[Source, db.JobListFinishedForRequeueRow] {
	f := b.req.Filter
	return bulk.Keyset[Source, db.JobListFinishedForRequeueRow]{
		Noun: "bulk job requeue",
		Count: func(ctx context.Context, q db.DBTX, until *time.Time) (int, error) {
			return countSelection(ctx, q, b.req, until)
		},
		Select: func(ctx context.Context, q db.DBTX, afterAt *time.Time, afterID *uuid.UUID, until *time.Time, max int32) ([]db.JobListFinishedForRequeueRow, error) {
			return queries.JobListFinishedForRequeue(ctx, q, db.JobListFinishedForRequeueParams{
				OrganizationID: rows.Tenant(b.req.Scope), Status: db.JobStatus(f.Status), JobType: optional(f.JobType),
				ErrorCode: optional(f.ErrorCode), Since: f.FinishedSince, Until: until,
				AfterFinishedAt: afterAt, AfterID: afterID, MaxJobs: max,
			})
		},
		Source: func(r db.JobListFinishedForRequeueRow) (Source, bulk.Cursor, time.Time) {
			return Source{JobID: r.ID, ExpectedStatus: Status(r.Status), ExpectedRunNumber: r.RunNumber},
				bulk.Cursor{At: r.FinishedAt, ID: r.ID}, r.SelectionUntil
		},
	}
}

// single requeues one job on its own with the single requeue's lock loop
// (in a transaction that rolls back, in a dry run) and turns its verdict
// into a result.
func (b *bulkAction) single(ctx context.Context, src Source) (BulkResult, error) {
	req := Request{Scope: b.req.Scope, JobID: src.JobID, ExpectedStatus: src.ExpectedStatus, ExpectedRunNumber: src.ExpectedRunNumber,
		StatePolicy: b.req.StatePolicy, Reason: b.req.Reason, Operator: b.req.Operator}
	out, err := bulk.Alone(ctx, b.pool, b.req.DryRun, bulkOperation,
		func(ctx context.Context) (Outcome, error) { return Job(ctx, b.pool, req) },
		func(ctx context.Context, tx pgx.Tx) (Outcome, error) { return run(ctx, txn.Join(tx, txOperation), req) })
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
