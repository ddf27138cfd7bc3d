package replay_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/replay"
)

// seedSucceeded inserts n SUCCEEDED jobs of jobType in scope at run 1,
// finished at finished, with UUIDv7 ids in creation order, and returns
// their ids.
func seedSucceeded(t testing.TB, q testdb.Querier, scope runledger.Scope, jobType string, n int, finished time.Time) []uuid.UUID {
	t.Helper()
	testdb.DefineType(t, q, jobType)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	testdb.Exec(t, q, `
		INSERT INTO job_queue (id, job_type, organization_id, payload, status, priority, run_number, attempt,
		    max_attempts, timeout_seconds, stage, started_at, finished_at, execution_resource_key)
		SELECT id, $2, $3, jsonb_build_object('n', ord), 'SUCCEEDED', 77, 1, 1, 5, 123, 'completed',
		       $4::timestamptz - interval '1 second', $4::timestamptz, 'res-' || ord
		FROM unnest($1::uuid[]) WITH ORDINALITY AS s(id, ord)`,
		ids, jobType, testdb.Tenant(scope), finished)
	return ids
}

func listOf(ids []uuid.UUID, run int32) []replay.Source {
	out := make([]replay.Source, len(ids))
	for i, id := range ids {
		out[i] = replay.Source{JobID: id, ExpectedRunNumber: run}
	}
	return out
}

// collect runs Bulk and returns its totals and every result in order.
func collect(t testing.TB, ctx context.Context, pool *pgxpool.Pool, req replay.BulkRequest) (replay.BulkSummary, []replay.BulkResult) {
	t.Helper()
	var all []replay.BulkResult
	sum, err := replay.Bulk(ctx, pool, req, func(c replay.BulkChunk) error {
		all = append(all, c.Results...)
		return nil
	})
	if err != nil {
		t.Fatalf("Bulk: %s", testdb.Detail(err))
	}
	return sum, all
}

// verdict is the single replay's answer in the bulk's terms.
func verdict(t testing.TB, out replay.Outcome, err error) (replay.BulkOutcome, *uuid.UUID) {
	t.Helper()
	switch {
	case errors.Is(err, runledger.CodeReplayIdempotencyConflict):
		return replay.BulkConflict, nil
	case errors.Is(err, runledger.CodeWorkflowManaged):
		return replay.BulkWorkflowManaged, nil
	case errors.Is(err, runledger.CodeDefinitionNotFoundOrDisabled):
		return replay.BulkDefinitionUnavailable, nil
	case err != nil:
		t.Fatalf("single replay: %s", testdb.Detail(err))
	}
	switch o := out.(type) {
	case replay.Replayed:
		id := o.Replay.JobID
		if o.Disposition == runledger.DispositionInserted {
			return replay.BulkInserted, &id
		}
		return replay.BulkExisting, &id
	case replay.ExpectationMismatch:
		return replay.BulkMismatch, nil
	case replay.NotFound:
		return replay.BulkNotFound, nil
	}
	t.Fatalf("single replay: outcome %T", out)
	return "", nil
}

const (
	parityKey    = "incident-42"
	parityReason = "downstream lost the invoices"
)

// parityScenario prepares, on a fresh database, one source of the
// reference scenarios, with a fixed id so both databases hold the same
// source, and returns the source to replay in scope.
type parityScenario struct {
	name string
	want replay.BulkOutcome
	prep func(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, org uuid.UUID) replay.Source
}

func seedWithID(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, org *uuid.UUID, jobType, status string, run int32) {
	t.Helper()
	testdb.DefineType(t, pool, jobType)
	testdb.Exec(t, pool, `
		INSERT INTO job_queue (id, job_type, organization_id, payload, status, priority, run_number, attempt,
		    max_attempts, timeout_seconds, stage, started_at, finished_at, execution_resource_key, worker_id)
		VALUES ($1, $2, $3, '{"to":"a@example.com","n":[1,2,3]}', $4::job_status, 77, $5, 1, 5, 123, 'completed',
		    now() - interval '2 minutes', now() - interval '1 minute', 'res-x', 'worker-1')`,
		id, jobType, testdb.Tenant(runledger.ScopeOf(org)), status, run)
}

var parityScenarios = []parityScenario{
	{"inserted", replay.BulkInserted, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, &org, "email", "SUCCEEDED", 1)
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"existing", replay.BulkExisting, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, &org, "email", "SUCCEEDED", 1)
		testdb.MustReplayed(t)(replay.SucceededJob(context.Background(), pool, replay.Request{
			Scope: runledger.Organization(org), SourceJobID: id, ExpectedRunNumber: 1, Key: parityKey, Reason: parityReason}))
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"conflict", replay.BulkConflict, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, &org, "email", "SUCCEEDED", 1)
		testdb.MustReplayed(t)(replay.SucceededJob(context.Background(), pool, replay.Request{
			Scope: runledger.Organization(org), SourceJobID: id, ExpectedRunNumber: 1, Key: parityKey, Reason: "another reason"}))
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"mismatch run", replay.BulkMismatch, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, &org, "email", "SUCCEEDED", 2)
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"mismatch status", replay.BulkMismatch, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, &org, "email", "DEAD_LETTERED", 1)
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"not found", replay.BulkNotFound, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		testdb.DefineType(t, pool, "email")
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"other tenant", replay.BulkNotFound, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		other := uuid.NewSHA1(org, []byte("other"))
		seedWithID(t, pool, id, &other, "email", "SUCCEEDED", 1)
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"global source, organization scope", replay.BulkNotFound, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, nil, "email", "SUCCEEDED", 1)
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"workflow-managed", replay.BulkWorkflowManaged, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, &org, "email", "SUCCEEDED", 1)
		testdb.OwnByWorkflowStep(t, pool, id)
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
	{"disabled definition", replay.BulkDefinitionUnavailable, func(t *testing.T, pool *pgxpool.Pool, id, org uuid.UUID) replay.Source {
		seedWithID(t, pool, id, &org, "sms", "SUCCEEDED", 1)
		testdb.Exec(t, pool, `UPDATE job_definitions SET is_enabled = false WHERE job_type = 'sms'`)
		return replay.Source{JobID: id, ExpectedRunNumber: 1}
	}},
}

// ledgerRows is everything a replay can write, without the columns that
// differ between two databases by construction (ids of new rows, times).
const ledgerRows = `
	SELECT jsonb_build_object(
	  'jobs', (SELECT coalesce(jsonb_agg(jsonb_build_object(
	       'id', CASE WHEN r.replay_job_id IS NULL THEN q.id::text ELSE 'replay of ' || r.source_job_id END,
	       'job_type', q.job_type, 'org', q.organization_id, 'payload', q.payload, 'status', q.status,
	       'priority', q.priority, 'run', q.run_number, 'attempt', q.attempt, 'max_attempts', q.max_attempts,
	       'timeout', q.timeout_seconds, 'stage', q.stage, 'resource', q.execution_resource_key,
	       'worker', q.worker_id, 'finished', q.finished_at IS NOT NULL, 'due_now', q.next_run_at >= now() - interval '1 minute',
	       'idem', q.idempotency_key, 'output', q.output, 'checkpoint', q.checkpoint, 'progress', q.progress_done)
	     ORDER BY coalesce(r.source_job_id, q.id), r.replay_request_key), '[]')
	     FROM job_queue q LEFT JOIN job_replays r ON r.organization_id = q.organization_id AND r.replay_job_id = q.id),
	  'events', (SELECT coalesce(jsonb_agg(jsonb_build_object(
	       'job', coalesce('replay of ' || r.source_job_id, e.job_id::text), 'type', e.event_type, 'run', e.run_number,
	       'attempt', e.attempt, 'stage', e.stage, 'payload', e.payload)
	     ORDER BY coalesce(r.source_job_id, e.job_id), r.replay_request_key, e.id), '[]')
	     FROM job_events e LEFT JOIN job_replays r ON r.organization_id = e.organization_id AND r.replay_job_id = e.job_id),
	  'lineage', (SELECT coalesce(jsonb_agg(jsonb_build_object(
	       'source', source_job_id, 'run', source_run_number, 'key', replay_request_key, 'reason', reason)
	     ORDER BY source_job_id, replay_request_key), '[]')
	     FROM job_replays))::text`

// TestBulkMatchesSingleReplayOnEveryScenario runs each reference scenario
// through SucceededJob on one database and through Bulk (all scenarios in
// one chunk, and each alone) on others holding the same sources, and
// compares the outcomes and every row written.
func TestBulkMatchesSingleReplayOnEveryScenario(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	org := uuid.New()
	scope := runledger.Organization(org)
	ids := make([]uuid.UUID, len(parityScenarios))
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	prepare := func() (*pgxpool.Pool, []replay.Source) {
		pool := testdb.New(t)
		srcs := make([]replay.Source, len(parityScenarios))
		for i, sc := range parityScenarios {
			srcs[i] = sc.prep(t, pool, ids[i], org)
		}
		return pool, srcs
	}

	single, srcs := prepare()
	singleOut := make([]replay.BulkOutcome, len(srcs))
	for i, src := range srcs {
		out, err := replay.SucceededJob(ctx, single, replay.Request{Scope: scope, SourceJobID: src.JobID,
			ExpectedRunNumber: src.ExpectedRunNumber, Key: parityKey, Reason: parityReason})
		var id *uuid.UUID
		singleOut[i], id = verdict(t, out, err)
		if singleOut[i] != parityScenarios[i].want {
			t.Fatalf("%s: single replay gave %s, want %s", parityScenarios[i].name, singleOut[i], parityScenarios[i].want)
		}
		if id != nil && testdb.Scalar[string](t, single, `SELECT replay_job_id::text FROM job_replays WHERE source_job_id = $1 AND replay_request_key = $2`, src.JobID, parityKey) != id.String() {
			t.Fatalf("%s: single replay id is not the lineage's", parityScenarios[i].name)
		}
	}
	want := testdb.Scalar[string](t, single, ledgerRows)

	check := func(what string, pool *pgxpool.Pool, results []replay.BulkResult, sum replay.BulkSummary, only []int) {
		t.Helper()
		if len(results) != len(only) || sum.Selected != len(only) {
			t.Fatalf("%s: %d results, %d selected, want %d", what, len(results), sum.Selected, len(only))
		}
		for k, i := range only {
			r := results[k]
			if r.SourceJobID != srcs[i].JobID || r.SourceRunNumber != srcs[i].ExpectedRunNumber {
				t.Fatalf("%s: result %d is %+v, want source %s", what, k, r, srcs[i].JobID)
			}
			if r.Result != singleOut[i] {
				t.Errorf("%s: %s: bulk gave %s, single %s", what, parityScenarios[i].name, r.Result, singleOut[i])
			}
			hasID := r.Result == replay.BulkInserted || r.Result == replay.BulkExisting
			if (r.ReplayJobID != nil) != hasID {
				t.Errorf("%s: %s: replay id %v with result %s", what, parityScenarios[i].name, r.ReplayJobID, r.Result)
			}
			if hasID && testdb.Scalar[string](t, pool, `SELECT replay_job_id::text FROM job_replays WHERE source_job_id = $1 AND replay_request_key = $2`, srcs[i].JobID, parityKey) != r.ReplayJobID.String() {
				t.Errorf("%s: %s: bulk replay id is not the lineage's", what, parityScenarios[i].name)
			}
		}
	}

	all := make([]int, len(srcs))
	for i := range all {
		all[i] = i
	}
	pool, srcs2 := prepare()
	sum, results := collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: parityKey, Reason: parityReason, Sources: srcs2})
	check("one chunk", pool, results, sum, all)
	if got := testdb.Scalar[string](t, pool, ledgerRows); got != want {
		t.Fatalf("bulk wrote other rows than the single replay:\nsingle %s\nbulk   %s", want, got)
	}

	// Each scenario alone (chunk of one), all in one database.
	pool, srcs3 := prepare()
	for i := range srcs3 {
		sum, results := collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: parityKey, Reason: parityReason, Sources: srcs3[i : i+1]})
		check("alone", pool, results, sum, []int{i})
	}
	if got := testdb.Scalar[string](t, pool, ledgerRows); got != want {
		t.Fatalf("bulk (one source at a time) wrote other rows than the single replay:\nsingle %s\nbulk   %s", want, got)
	}
}

// TestBulkReplayEventAndLineage checks an inserted replay's event payload
// key by key, beside the single replay's.
func TestBulkReplayEventAndLineage(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	scope := runledger.Global()
	ids := seedSucceeded(t, pool, scope, "email", 2, time.Now().Add(-time.Hour))
	single := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: ids[0], ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	_, results := collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: "k", Reason: "r", Sources: listOf(ids[1:], 1)})
	if results[0].Result != replay.BulkInserted {
		t.Fatalf("result %+v", results[0])
	}
	payload := func(replayID uuid.UUID, source uuid.UUID) string {
		return testdb.Scalar[string](t, pool, `
			SELECT (payload - 'replayed_from_job_id')::text || ' ' || (payload->>'replayed_from_job_id' = $2::text)::text
			       || ' ' || event_type::text || ' ' || run_number || ' ' || stage
			FROM job_events WHERE job_id = $1`, replayID, source.String())
	}
	if a, b := payload(single.Replay.JobID, ids[0]), payload(*results[0].ReplayJobID, ids[1]); a != b || !strings.Contains(a, `"reason": "r"`) {
		t.Fatalf("event payloads differ:\nsingle %s\nbulk   %s", a, b)
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events WHERE job_id = $1`, *results[0].ReplayJobID); n != 1 {
		t.Fatalf("%d events for the bulk replay, want 1", n)
	}
	if v := results[0].ReplayJobID.Version(); v != 7 {
		t.Fatalf("bulk replay id is a UUIDv%d, want v7", v)
	}
}

// bulkBackend tags the connections of the bulk under test, so a test can
// find its backend in pg_stat_activity.
const bulkBackend = "bulk-under-test"

type killMarker struct{}

func killBulkBackend(t *testing.T, admin *pgxpool.Pool) {
	testdb.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, bulkBackend)
	testdb.WaitFor(t, "the bulk backend to end", func() bool {
		return testdb.Scalar[int64](t, admin, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, bulkBackend) == 0
	})
}

// TestBulkKilledConnectionKeepsWholeChunksAndRerunConverges kills the
// bulk's backend at a chunk boundary, after a chunk's lock and before a
// chunk's COMMIT: only the chunks committed before stay, whole, and the
// same action again replays exactly the rest.
func TestBulkKilledConnectionKeepsWholeChunksAndRerunConverges(t *testing.T) {
	for _, point := range []string{"boundary", "after lock", "before commit"} {
		t.Run(point, func(t *testing.T) {
			ctx := context.WithValue(testdb.Context(t), killMarker{}, true)
			url := testdb.NewURL(t)
			admin := testdb.OpenPool(t, url, 4, nil)
			pool := testdb.OpenPool(t, url, 1, map[string]string{"application_name": bulkBackend})
			scope := runledger.Organization(uuid.New())
			ids := seedSucceeded(t, admin, scope, "email", 35, time.Now().Add(-time.Hour))
			req := replay.BulkRequest{Scope: scope, Key: "kill-" + point, Reason: "r", Sources: listOf(ids, 1), ChunkSize: 10}

			mine := func(ctx context.Context) bool { return ctx.Value(killMarker{}) != nil }
			var disable func()
			switch point {
			case "boundary":
				disable = failpoint.EnableFor(replay.FailpointBulkAfterChunk, func(ctx context.Context, arg any) {
					if mine(ctx) && arg.(replay.BulkCall).Chunk == 1 {
						killBulkBackend(t, admin)
					}
				}, mine)
			case "after lock":
				disable = failpoint.EnableFor(replay.FailpointBulkAfterLock, func(ctx context.Context, arg any) {
					if mine(ctx) && arg.(replay.BulkCall).Chunk == 2 {
						killBulkBackend(t, admin)
					}
				}, mine)
			case "before commit":
				commits := 0
				disable = failpoint.EnableFor(txn.FailpointBeforeCommit, func(ctx context.Context, arg any) {
					if mine(ctx) && arg.(txn.FailpointCall).Op == replay.BulkOperation {
						if commits == 2 {
							// The chunk's replays are written, not committed. On
							// Citus they are written by the worker nodes'
							// backends of the bulk's distributed transaction,
							// which share its global pid.
							held := `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1 AND l.locktype = 'transactionid'`
							if testdb.Citus() {
								held = `SELECT count(*) FROM citus_stat_activity a
									WHERE a.global_pid IN (SELECT global_pid FROM citus_stat_activity WHERE application_name = $1)
									  AND a.backend_xid IS NOT NULL`
							}
							if n := testdb.Scalar[int64](t, admin, held, bulkBackend); n == 0 {
								t.Errorf("the bulk holds no transaction id before COMMIT: nothing was written")
							}
							killBulkBackend(t, admin)
						}
						commits++
					}
				}, mine)
			}
			var chunks []int
			_, err := replay.Bulk(ctx, pool, req, func(c replay.BulkChunk) error {
				chunks = append(chunks, c.Index)
				return nil
			})
			disable()
			if err == nil {
				t.Fatal("Bulk survived the kill of its connection")
			}
			if !errors.Is(err, runledger.CodeTransient) && !errors.Is(err, runledger.ErrCommitUnconfirmed) {
				t.Fatalf("error %s, want transient or commit unconfirmed", testdb.Detail(err))
			}
			if fmt.Sprint(chunks) != "[0 1]" {
				t.Fatalf("chunks reported %v, want [0 1]", chunks)
			}
			replayed := testdb.Column[uuid.UUID](t, admin, `SELECT source_job_id FROM job_replays WHERE replay_request_key = $1 ORDER BY source_job_id`, req.Key)
			if fmt.Sprint(replayed) != fmt.Sprint(sorted(ids[:20])) {
				t.Fatalf("after the kill, lineage of %d sources, want exactly the first two chunks (20)", len(replayed))
			}
			if n := testdb.Count(t, admin, "job_queue"); n != 35+20 {
				t.Fatalf("%d jobs after the kill, want 55", n)
			}

			sum, results := collect(t, ctx, pool, req)
			if sum.Existing != 20 || sum.Inserted != 15 || sum.Selected != 35 {
				t.Fatalf("rerun summary %+v, want 20 existing and 15 inserted", sum)
			}
			for i, r := range results {
				want := replay.BulkInserted
				if i < 20 {
					want = replay.BulkExisting
				}
				if r.Result != want {
					t.Fatalf("rerun result %d: %s, want %s", i, r.Result, want)
				}
			}
			assertReplayedOnce(t, admin, req.Key, ids)
		})
	}
}

func sorted(ids []uuid.UUID) []uuid.UUID {
	out := append([]uuid.UUID(nil), ids...)
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// assertReplayedOnce checks that each source has exactly one replay under
// key, with one ENQUEUED event, and that nothing else was replayed.
func assertReplayedOnce(t *testing.T, q testdb.Querier, key string, ids []uuid.UUID) {
	t.Helper()
	distinct := map[uuid.UUID]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	// Grouped rather than probed per source, so that Citus runs it too.
	once := testdb.Scalar[int64](t, q, `
		SELECT count(*) FROM (SELECT source_job_id FROM job_replays
		                      WHERE replay_request_key = $2 AND source_job_id = ANY($1)
		                      GROUP BY source_job_id HAVING count(*) = 1) AS s`, ids, key)
	bad := int64(len(distinct)) - once
	if bad != 0 {
		t.Fatalf("%d sources not replayed exactly once under %q", bad, key)
	}
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_replays WHERE replay_request_key = $1`, key); n != int64(len(ids)) {
		t.Fatalf("%d lineage rows under %q, want %d", n, key, len(ids))
	}
	if n := testdb.Scalar[int64](t, q, `
		SELECT count(*) FROM job_replays jr
		WHERE jr.replay_request_key = $1
		  AND (SELECT count(*) FROM job_events e WHERE e.organization_id = jr.organization_id AND e.job_id = jr.replay_job_id AND e.event_type = 'ENQUEUED') <> 1`, key); n != 0 {
		t.Fatalf("%d replays without exactly one ENQUEUED event", n)
	}
}
