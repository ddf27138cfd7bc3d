package requeue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/requeue"
)

// seedFinished inserts n jobs of typ in scope, in status at run 1 with
// error code code, finished at finished (one microsecond apart), with the
// terminal event a worker or cancel would have left, and returns their
// ids in finish order.
func seedFinished(t testing.TB, pool *pgxpool.Pool, scope runledger.Scope, typ, status, code string, n int, finished time.Time) []uuid.UUID {
	t.Helper()
	testdb.DefineType(t, pool, typ)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	testdb.Exec(t, pool, `
		INSERT INTO job_queue (id, job_type, organization_id, status, run_number, attempt, max_attempts, stage,
		    last_error_code, finished_at, progress_done, progress_total, checkpoint)
		SELECT id, $2, $3, $4::job_status, 1, 1, 1, 'running', $5, $6::timestamptz + make_interval(secs => ord / 1e6), 2, 4, '{"c":2}'
		FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)`, ids, typ, testdb.Tenant(scope), status, code, finished)
	testdb.Exec(t, pool, `
		INSERT INTO job_events (organization_id, job_id, run_number, attempt, event_type, payload)
		SELECT $2, id, 1, 1, $3::job_event_type, '{}' FROM unnest($1::uuid[]) AS u(id)`, ids, testdb.Tenant(scope), status)
	return ids
}

// scenario is one job of every kind a bulk action meets, with the verdict
// the single requeue gives it.
type scenario struct {
	sources []requeue.Source
	want    []requeue.BulkOutcome
}

func newScenario(t *testing.T, ctx context.Context, pool *pgxpool.Pool, org runledger.Scope) scenario {
	t.Helper()
	at := time.Now().Add(-time.Hour)
	dead := seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "provider.down", 4, at)
	done := seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "provider.down", 2, at)
	mustRequeued(t)(requeue.Job(ctx, pool, requeue.Request{Scope: org, JobID: done[0], ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "provider back"}))
	mustRequeued(t)(requeue.Job(ctx, pool, requeue.Request{Scope: org, JobID: done[1], ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1, Reason: "other reason"}))
	canceled := seedFinished(t, pool, org, "charge.capture", "CANCELED", "", 2, at)
	testdb.Exec(t, pool, `UPDATE job_queue SET lease_expires_at = now() + interval '1 hour', worker_id = 'w' WHERE id = $1`, canceled[0])
	managed := seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "", 1, at)[0]
	testdb.OwnByWorkflowStep(t, pool, managed)
	foreign := seedFinished(t, pool, runledger.Organization(uuid.New()), "charge.capture", "DEAD_LETTERED", "", 1, at)[0]
	src := func(id uuid.UUID, st requeue.Status, run int32) requeue.Source {
		return requeue.Source{JobID: id, ExpectedStatus: st, ExpectedRunNumber: run}
	}
	return scenario{
		sources: []requeue.Source{
			src(dead[0], requeue.DeadLettered, 1), src(done[0], requeue.DeadLettered, 1), src(dead[1], requeue.DeadLettered, 2),
			src(done[1], requeue.DeadLettered, 1), src(canceled[0], requeue.Canceled, 1), src(canceled[1], requeue.Canceled, 1),
			src(managed, requeue.DeadLettered, 1), src(foreign, requeue.DeadLettered, 1), src(uuid.New(), requeue.DeadLettered, 1),
			src(dead[2], requeue.Canceled, 1), src(dead[3], requeue.DeadLettered, 1),
		},
		want: []requeue.BulkOutcome{
			requeue.BulkRequeued, requeue.BulkExisting, requeue.BulkMismatch,
			requeue.BulkMismatch, requeue.BulkNotQuiesced, requeue.BulkRequeued,
			requeue.BulkWorkflowManaged, requeue.BulkNotFound, requeue.BulkNotFound,
			requeue.BulkMismatch, requeue.BulkRequeued,
		},
	}
}

// singleVerdict is what the single requeue says of a source.
func singleVerdict(t *testing.T, ctx context.Context, pool *pgxpool.Pool, org runledger.Scope, s requeue.Source) requeue.BulkOutcome {
	t.Helper()
	out, err := requeue.Job(ctx, pool, requeue.Request{Scope: org, JobID: s.JobID, ExpectedStatus: s.ExpectedStatus, ExpectedRunNumber: s.ExpectedRunNumber, Reason: "provider back"})
	if errors.Is(err, runledger.CodeWorkflowManaged) {
		return requeue.BulkWorkflowManaged
	}
	if err != nil {
		t.Fatalf("single requeue: %v", err)
	}
	switch o := out.(type) {
	case requeue.Requeued:
		if o.Disposition == runledger.DispositionInserted {
			return requeue.BulkRequeued
		}
		return requeue.BulkExisting
	case requeue.ExpectationMismatch:
		return requeue.BulkMismatch
	case requeue.NotQuiesced:
		return requeue.BulkNotQuiesced
	case requeue.NotFound:
		return requeue.BulkNotFound
	}
	t.Fatalf("outcome %T", out)
	return ""
}

// jobState is what a requeue leaves of a job, compared between the bulk
// and single forms.
func jobState(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	t.Helper()
	return testdb.Scalar[string](t, pool, `
		SELECT concat_ws('|', status, run_number, attempt, stage, progress_done, progress_total, checkpoint::text, status_reason,
		       last_error_code, finished_at IS NULL, (SELECT string_agg(concat_ws(':', run_number, attempt, payload::text), ',' ORDER BY id)
		                                              FROM job_events e WHERE e.organization_id = q.organization_id AND e.job_id = q.id AND e.event_type = 'REQUEUED'))
		FROM job_queue q WHERE id = $1`, id)
}

// Bulk gives every job the single requeue's verdict and leaves the same
// rows, in chunks of 3 over a list that has one job of every kind; the
// same action again reports what it requeued existing and writes nothing.
func TestBulkParityWithSingle(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := runledger.Organization(uuid.New())
	single, bulkSet := newScenario(t, ctx, pool, org), newScenario(t, ctx, pool, org)

	var got []requeue.BulkResult
	var chunks int
	sum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "provider back", Sources: bulkSet.sources, ChunkSize: 3},
		func(c requeue.BulkChunk) error {
			chunks++
			got = append(got, c.Results...)
			if c.Expected != len(bulkSet.sources) {
				t.Errorf("expected = %d", c.Expected)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if chunks != 4 || sum.Selected != 11 || sum.Requeued != 3 || sum.Existing != 1 || sum.Mismatch != 3 || sum.NotFound != 2 ||
		sum.WorkflowManaged != 1 || sum.NotQuiesced != 1 || sum.Refused() != 7 {
		t.Fatalf("%d chunks, summary %+v", chunks, sum)
	}
	for i, s := range single.sources {
		verdict := singleVerdict(t, ctx, pool, org, s)
		if verdict != single.want[i] || got[i].Result != verdict || got[i].JobID != bulkSet.sources[i].JobID {
			t.Errorf("source %d: single %s, bulk %s, want %s", i, verdict, got[i].Result, single.want[i])
		}
		if verdict == requeue.BulkRequeued {
			if a, b := jobState(t, pool, s.JobID), jobState(t, pool, bulkSet.sources[i].JobID); a != b {
				t.Errorf("source %d: single left %s, bulk left %s", i, a, b)
			}
		}
	}

	events := testdb.Count(t, pool, "job_events")
	again, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "provider back", Sources: bulkSet.sources, ChunkSize: 5}, nil)
	if err != nil || again.Requeued != 0 || again.Existing != 4 || testdb.Count(t, pool, "job_events") != events {
		t.Fatalf("rerun: %+v %v, %d events written", again, err, testdb.Count(t, pool, "job_events")-events)
	}
}

// A filter selects exactly the jobs of its scope, status, type, error
// code and finish window, at most its limit, in finish order; a dry run
// reports the same and writes nothing; jobs that finish after the pinned
// bound are not selected by a rerun with it.
func TestBulkFilter(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := runledger.Organization(uuid.New())
	t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	in := seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "provider.down", 7, t0)
	seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "card.declined", 2, t0)
	seedFinished(t, pool, org, "refund", "DEAD_LETTERED", "provider.down", 2, t0)
	seedFinished(t, pool, org, "charge.capture", "CANCELED", "provider.down", 2, t0)
	seedFinished(t, pool, runledger.Organization(uuid.New()), "charge.capture", "DEAD_LETTERED", "provider.down", 3, t0)
	seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "provider.down", 2, t0.Add(-time.Hour)) // before since

	since := t0.Add(-time.Minute)
	filter := &requeue.Filter{Status: requeue.DeadLettered, JobType: "charge.capture", ErrorCode: "provider.down", FinishedSince: &since}
	n, err := requeue.BulkCount(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "r", Filter: filter})
	if err != nil || n != 7 {
		t.Fatalf("BulkCount = %d, %v", n, err)
	}
	events := testdb.Count(t, pool, "job_events")
	dry, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "r", Filter: filter, DryRun: true, ChunkSize: 3}, nil)
	if err != nil || dry.Selected != 7 || dry.Requeued != 7 || testdb.Count(t, pool, "job_events") != events {
		t.Fatalf("dry run: %+v %v", dry, err)
	}

	limited := *filter
	limited.Limit = 5
	var order []uuid.UUID
	var until *time.Time
	sum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "r", Filter: &limited, ChunkSize: 2, Count: true},
		func(c requeue.BulkChunk) error {
			for _, r := range c.Results {
				order = append(order, r.JobID)
			}
			if c.Expected != 5 {
				t.Errorf("expected = %d, want 5", c.Expected)
			}
			until = c.FinishedUntil
			return nil
		})
	if err != nil || sum.Selected != 5 || sum.Requeued != 5 || until == nil {
		t.Fatalf("limited: %+v %v", sum, err)
	}
	for i, id := range order {
		if id != in[i] {
			t.Fatalf("order %v, want the finish order %v", order, in[:5])
		}
	}
	// A job that finishes now, after the pinned bound, is not selected by
	// the resume; the two left are.
	late := seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "provider.down", 1, time.Now().Add(time.Minute))
	resume := *filter
	resume.FinishedUntil = until
	rest, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: "r", Filter: &resume}, nil)
	if err != nil || rest.Selected != 2 || rest.Requeued != 2 {
		t.Fatalf("resume: %+v %v", rest, err)
	}
	if st := testdb.Scalar[string](t, pool, `SELECT status::text FROM job_queue WHERE id = $1`, late[0]); st != "DEAD_LETTERED" {
		t.Fatalf("late job is %s", st)
	}
	// Nothing of another tenant, type, code or status was touched.
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue WHERE status = 'PENDING'`); n != 7 {
		t.Fatalf("%d jobs PENDING, want the 7 selected", n)
	}
}

// An action killed at a chunk boundary (its context canceled after a
// chunk committed) or in mid-chunk (after the locking update, before
// COMMIT) leaves whole chunks only; rerunning it converges: every job
// requeued exactly once.
func TestBulkKilledAndRerunConverges(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := runledger.Organization(uuid.New())
	ids := seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "provider.down", 10, time.Now().Add(-time.Hour))
	list := make([]requeue.Source, len(ids))
	for i, id := range ids {
		list[i] = requeue.Source{JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1}
	}
	reason := "killed-" + uuid.NewString()
	req := requeue.BulkRequest{Scope: org, Reason: reason, Sources: list, ChunkSize: 3}
	kill := func(point string, chunk int) error {
		kctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer failpoint.Enable(point, func(_ context.Context, arg any) {
			if c, ok := arg.(requeue.BulkCall); ok && c.Label == reason && c.Chunk == chunk {
				cancel()
			}
		})()
		_, err := requeue.Bulk(kctx, pool, req, nil)
		return err
	}
	requeuedNow := func() int64 {
		return testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue WHERE id = ANY($1) AND status = 'PENDING' AND run_number = 2`, ids)
	}

	if err := kill(requeue.FailpointBulkAfterChunk, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("killed after chunk 2: %v", err)
	}
	if n := requeuedNow(); n != 6 {
		t.Fatalf("after a kill at the boundary of chunk 2: %d requeued, want 6", n)
	}
	// Mid-chunk: the next chunk's update ran, its COMMIT never did.
	if err := kill(requeue.FailpointBulkAfterRequeue, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("killed mid-chunk: %v", err)
	}
	if n := requeuedNow(); n != 6 {
		t.Fatalf("after a kill mid-chunk: %d requeued, want still 6", n)
	}
	sum, err := requeue.Bulk(ctx, pool, req, nil)
	if err != nil || sum.Requeued != 4 || sum.Existing != 6 || requeuedNow() != 10 {
		t.Fatalf("rerun: %+v %v, %d requeued", sum, err, requeuedNow())
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events WHERE job_id = ANY($1) AND event_type = 'REQUEUED'`, ids); n != 10 {
		t.Fatalf("%d REQUEUED events, want 10", n)
	}
}

// Bad bulk input is refused before any connection.
func TestBulkBadInputRefusedBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.ClosedPool(t)
	id := uuid.New()
	src := []requeue.Source{{JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1}}
	ok := requeue.BulkRequest{Reason: "r", Sources: src}
	now := time.Now()
	cases := map[string]func(r *requeue.BulkRequest){
		"job.requeue_reason_blank":           func(r *requeue.BulkRequest) { r.Reason = "  " },
		"job.requeue_bulk_selection_invalid": func(r *requeue.BulkRequest) { r.Sources = nil },
		"job.requeue_bulk_sources_empty":     func(r *requeue.BulkRequest) { r.Sources = []requeue.Source{} },
		"job.requeue_bulk_duplicate_source":  func(r *requeue.BulkRequest) { r.Sources = append(src, src[0]) },
		"job.requeue_status_invalid": func(r *requeue.BulkRequest) {
			r.Sources = []requeue.Source{{JobID: id, ExpectedStatus: "SUCCEEDED", ExpectedRunNumber: 1}}
		},
		"job.requeue_bulk_range_invalid": func(r *requeue.BulkRequest) {
			r.Sources, r.Filter = nil, &requeue.Filter{Status: requeue.Canceled, FinishedSince: &now, FinishedUntil: &now}
		},
		"job.requeue_bulk_limit_invalid": func(r *requeue.BulkRequest) {
			r.Sources, r.Filter = nil, &requeue.Filter{Status: requeue.Canceled, Limit: -1}
		},
		"job.job_type_invalid": func(r *requeue.BulkRequest) {
			r.Sources, r.Filter = nil, &requeue.Filter{Status: requeue.Canceled, JobType: "a\x00"}
		},
		"job.requeue_bulk_error_code_invalid": func(r *requeue.BulkRequest) {
			r.Sources, r.Filter = nil, &requeue.Filter{Status: requeue.Canceled, ErrorCode: strings.Repeat("e", 256)}
		},
		"job.requeue_bulk_chunk_invalid": func(r *requeue.BulkRequest) { r.ChunkSize = -1 },
		"job.requeue_bulk_rate_invalid":  func(r *requeue.BulkRequest) { r.Rate = -1 },
	}
	for code, mutate := range cases {
		req := ok
		mutate(&req)
		_, err := requeue.Bulk(ctx, pool, req, nil)
		if runledger.CodeOf(err) != runledger.Code(code) || runledger.CategoryOf(err) != runledger.CategoryValidation {
			t.Errorf("%s: got %v", code, err)
		}
	}
	if _, err := requeue.BulkCount(ctx, pool, requeue.BulkRequest{Reason: "r", Stream: func(func(requeue.Source, error) bool) {}}); runledger.CodeOf(err) != "job.requeue_bulk_selection_invalid" {
		t.Errorf("count of a stream: %v", err)
	}
}

// TestBulkOperatorRecordedForAJobRequeuedOnItsOwn: a job the chunk hands
// back (it changed under the locking update) is requeued on its own under
// the request's operator too, so every REQUEUED event of the action names
// who asked for it.
func TestBulkOperatorRecordedForAJobRequeuedOnItsOwn(t *testing.T) {
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := runledger.Organization(uuid.New())
	ids := seedFinished(t, pool, org, "charge.capture", "DEAD_LETTERED", "provider.down", 3, time.Now().Add(-time.Hour))
	list := make([]requeue.Source, len(ids))
	for i, id := range ids {
		list[i] = requeue.Source{JobID: id, ExpectedStatus: requeue.DeadLettered, ExpectedRunNumber: 1}
	}
	reason := "operator-" + uuid.NewString()
	// ids[1] is PENDING when the chunk's update runs, DEAD_LETTERED again
	// when the chunk classifies what the update passed by.
	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'PENDING' WHERE id = $1`, ids[1])
	disable := failpoint.Enable(requeue.FailpointBulkAfterRequeue, func(_ context.Context, arg any) {
		if c, ok := arg.(requeue.BulkCall); ok && c.Label == reason {
			testdb.Exec(t, pool, `UPDATE job_queue SET status = 'DEAD_LETTERED' WHERE id = $1`, ids[1])
		}
	})
	sum, err := requeue.Bulk(ctx, pool, requeue.BulkRequest{Scope: org, Reason: reason, Operator: "alice@example.com", Sources: list}, nil)
	disable()
	if err != nil || sum.Requeued != 3 {
		t.Fatalf("%+v %v", sum, err)
	}
	for _, id := range ids {
		op := testdb.Scalar[string](t, pool, `SELECT coalesce(payload->>'operator', '') FROM job_events WHERE job_id = $1 AND event_type = 'REQUEUED'`, id)
		if op != "alice@example.com" {
			t.Fatalf("job %s: REQUEUED operator %q, want alice@example.com", id, op)
		}
	}
}
