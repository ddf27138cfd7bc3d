package replay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// sourceSnapshot is the whole source row as JSON, to prove replay never
// changes it.
const sourceSnapshot = `SELECT to_jsonb(q) FROM job_queue q WHERE id = $1`

func TestInsertedReplayIsAFreshCopyAndLeavesTheSourceUntouched(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := uuid.New()
	key := "source-key"
	src := testdb.Succeeded(runledger.Organization(org))
	src.IdempotencyKey = &key
	sourceID := testdb.Seed(t, pool, src)
	before := testdb.Scalar[string](t, pool, sourceSnapshot, sourceID)

	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{
		Scope: runledger.Organization(org), SourceJobID: sourceID, ExpectedRunNumber: 1,
		Key: "replay-1", Reason: "customer asked again",
	}))

	if got.Disposition != runledger.DispositionInserted || got.Replay.Status != runledger.JobStatusPending ||
		got.Replay.RunNumber != 1 || got.SourceJobID != sourceID || got.SourceRunNumber != 1 {
		t.Fatalf("outcome %+v", got)
	}
	if got.Replay.JobID == sourceID || got.Replay.JobID.Version() != 7 {
		t.Fatalf("replay id %s: want a new UUIDv7", got.Replay.JobID)
	}
	if after := testdb.Scalar[string](t, pool, sourceSnapshot, sourceID); after != before {
		t.Fatalf("source changed:\nbefore %s\nafter  %s", before, after)
	}

	// The replay copies type, tenant, payload and settings, and nothing else.
	var (
		jobType, stage, status                       string
		orgID                                        *uuid.UUID
		payload                                      []byte
		priority, run, attempt, maxAttempts, timeout int32
		progressDone, progressTotal                  *int64
		checkpoint, output, enqueueRequest           []byte
		idemKey, workerID, statusReason, lastErr     *string
		nextRunIsNow, noTimes                        bool
	)
	if err := pool.QueryRow(ctx, `
		SELECT job_type, organization_id, payload, status::text, priority, run_number, attempt,
		       max_attempts, timeout_seconds, stage, progress_done, progress_total, checkpoint,
		       output, idempotency_key, enqueue_request, worker_id, status_reason, last_error_code,
		       next_run_at = created_at,
		       lease_expires_at IS NULL AND started_at IS NULL AND finished_at IS NULL
		         AND last_heartbeat_at IS NULL AND progress_pct IS NULL
		FROM job_queue WHERE id = $1`, got.Replay.JobID).Scan(
		&jobType, &orgID, &payload, &status, &priority, &run, &attempt, &maxAttempts, &timeout,
		&stage, &progressDone, &progressTotal, &checkpoint, &output, &idemKey, &enqueueRequest,
		&workerID, &statusReason, &lastErr, &nextRunIsNow, &noTimes); err != nil {
		t.Fatal(err)
	}
	if jobType != "email" || orgID == nil || *orgID != org || status != "PENDING" || priority != 77 ||
		run != 1 || attempt != 0 || maxAttempts != 5 || timeout != 123 || stage != "queued" {
		t.Fatalf("replay row: type %s org %v status %s prio %d run %d attempt %d max %d timeout %d stage %s",
			jobType, orgID, status, priority, run, attempt, maxAttempts, timeout, stage)
	}
	testdb.JSONEqual(t, "replay payload", payload, src.Payload)
	if progressDone != nil || progressTotal != nil || checkpoint != nil || output != nil || idemKey != nil ||
		enqueueRequest != nil || workerID != nil || statusReason != nil || lastErr != nil || !noTimes {
		t.Fatal("replay copied state it must reset")
	}
	if !nextRunIsNow {
		t.Fatal("replay next_run_at is not the transaction's now()")
	}

	// Exactly one event, ENQUEUED, with the five-key provenance payload.
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events WHERE job_id = $1`, sourceID); n != 0 {
		t.Fatalf("source got %d events", n)
	}
	var evType, evStage string
	var evRun int32
	var evAttempt *int32
	var evPayload []byte
	if err := pool.QueryRow(ctx, `
		SELECT event_type::text, stage, run_number, attempt, payload FROM job_events WHERE job_id = $1`,
		got.Replay.JobID).Scan(&evType, &evStage, &evRun, &evAttempt, &evPayload); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events WHERE job_id = $1`, got.Replay.JobID); n != 1 {
		t.Fatalf("replay has %d events, want 1", n)
	}
	if evType != "ENQUEUED" || evStage != "queued" || evRun != 1 || evAttempt != nil {
		t.Fatalf("event %s %s run %d attempt %v", evType, evStage, evRun, evAttempt)
	}
	testdb.JSONEqual(t, "event payload", evPayload, `{"job_type":"email","replayed_from_job_id":"`+sourceID.String()+
		`","replayed_from_run_number":1,"replay_request_key":"replay-1","reason":"customer asked again"}`)

	// The lineage row.
	var lSource uuid.UUID
	var lRun int32
	var lKey, lReason string
	if err := pool.QueryRow(ctx, `
		SELECT source_job_id, source_run_number, replay_request_key, reason FROM job_replays
		WHERE replay_job_id = $1`, got.Replay.JobID).Scan(&lSource, &lRun, &lKey, &lReason); err != nil {
		t.Fatal(err)
	}
	if lSource != sourceID || lRun != 1 || lKey != "replay-1" || lReason != "customer asked again" {
		t.Fatalf("lineage %s %d %q %q", lSource, lRun, lKey, lReason)
	}
}

func TestRetryWithSameKeyAndReasonReturnsTheExistingReplay(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}

	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	// The replay moves on; a retry reports its current state.
	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'SUCCEEDED', run_number = 3 WHERE id = $1`, first.Replay.JobID)
	second := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))

	if second.Disposition != runledger.DispositionExisting || second.Replay.JobID != first.Replay.JobID ||
		second.Replay.Status != runledger.JobStatusSucceeded || second.Replay.RunNumber != 3 ||
		second.SourceJobID != sourceID || second.SourceRunNumber != 1 {
		t.Fatalf("retry %+v, first %+v", second, first)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 1 {
		t.Fatalf("%d lineage rows", n)
	}
	if n := testdb.Count(t, pool, "job_events"); n != 1 {
		t.Fatalf("%d events", n)
	}
}

func TestRetryFindsLineageEvenAfterTheSourceMovedOn(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'PENDING', run_number = 2 WHERE id = $1`, sourceID)

	again := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	if again.Disposition != runledger.DispositionExisting || again.Replay.JobID != first.Replay.JobID {
		t.Fatalf("retry after the source changed: %+v", again)
	}
}

func TestSameKeyWithAnotherReasonIsAConflict(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))

	_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "R"})
	e := testdb.WantCode(t, err, runledger.CodeReplayIdempotencyConflict)
	if !errors.Is(err, runledger.CodeReplayIdempotencyConflict) || e.Category != runledger.CategoryConflict ||
		e.Message != "Job replay request conflicts with the existing replay key." {
		t.Fatalf("conflict error %+v", e)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 1 {
		t.Fatalf("%d lineage rows", n)
	}
}

func TestSameKeyAtAnotherRunIsAnotherReplay(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	s := testdb.Succeeded(runledger.Global())
	s.Run = 1
	sourceID := testdb.Seed(t, pool, s)
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	testdb.Exec(t, pool, `UPDATE job_queue SET run_number = 2 WHERE id = $1`, sourceID)
	second := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 2, Key: "k", Reason: "r"}))
	if second.Disposition != runledger.DispositionInserted || second.Replay.JobID == first.Replay.JobID || second.SourceRunNumber != 2 {
		t.Fatalf("second run's replay %+v", second)
	}
}

func TestReplayCopiesTheExecutionResourceKey(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	s := testdb.Succeeded(runledger.Global())
	resource := "printer-7"
	s.ResourceKey = &resource
	sourceID := testdb.Seed(t, pool, s)
	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	if key := testdb.Scalar[*string](t, pool, `SELECT execution_resource_key FROM job_queue WHERE id = $1`, got.Replay.JobID); key == nil || *key != resource {
		t.Fatalf("replay resource key %v, want %q", key, resource)
	}
}

func TestScopeIsExactAndMismatchesReportTheActualJob(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	org := uuid.New()
	orgSource := testdb.Seed(t, pool, testdb.Succeeded(runledger.Organization(org)))
	globalSource := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	before := testdb.Scalar[string](t, pool, sourceSnapshot, orgSource)

	cases := []struct {
		name  string
		scope runledger.Scope
		id    uuid.UUID
		run   int32
		want  string
	}{
		{"global scope cannot see an organization's job", runledger.Global(), orgSource, 1, "not_found"},
		{"another organization cannot see it", runledger.Organization(uuid.New()), orgSource, 1, "not_found"},
		{"an organization cannot see a global job", runledger.Organization(org), globalSource, 1, "not_found"},
		{"a missing job", runledger.Organization(org), uuid.New(), 1, "not_found"},
		{"a stale run", runledger.Organization(org), orgSource, 99, "mismatch"},
		{"run zero", runledger.Organization(org), orgSource, 0, "mismatch"},
		{"a negative run", runledger.Organization(org), orgSource, -1, "mismatch"},
	}
	for _, c := range cases {
		out, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: c.scope, SourceJobID: c.id, ExpectedRunNumber: c.run, Key: "k", Reason: "r"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		kind := replay.Match(out,
			func(replay.Replayed) string { return "replayed" },
			func(m replay.ExpectationMismatch) string {
				if m.Actual.ID != orgSource || m.Actual.Status != runledger.JobStatusSucceeded || m.Actual.RunNumber != 1 ||
					m.Actual.OrganizationID == nil || *m.Actual.OrganizationID != org {
					t.Errorf("%s: actual %+v", c.name, m.Actual)
				}
				return "mismatch"
			},
			func(replay.NotFound) string { return "not_found" })
		if kind != c.want {
			t.Errorf("%s: %s, want %s", c.name, kind, c.want)
		}
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 0 {
		t.Fatalf("%d lineage rows after observations", n)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 2 {
		t.Fatalf("%d jobs after observations", n)
	}
	if after := testdb.Scalar[string](t, pool, sourceSnapshot, orgSource); after != before {
		t.Fatal("an observation changed the source")
	}
}

func TestNonSucceededSourceIsAMismatch(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	for _, status := range []string{"PENDING", "LEASED", "DEAD_LETTERED", "CANCELED"} {
		s := testdb.Succeeded(runledger.Global())
		s.Status = status
		id := testdb.Seed(t, pool, s)
		out, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: id, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
		if err != nil {
			t.Fatalf("%s: %v", status, err)
		}
		m, ok := out.(replay.ExpectationMismatch)
		if !ok || string(m.Actual.Status) != status {
			t.Fatalf("%s: outcome %+v", status, out)
		}
	}
}

func TestWorkflowManagedSourceCannotBeReplayed(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	ownBySingleStepWorkflow(t, pool, sourceID)

	_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	e := testdb.WantCode(t, err, runledger.CodeWorkflowManaged)
	if !errors.Is(err, runledger.CodeWorkflowManaged) || e.Category != runledger.CategoryValidation ||
		e.Message != "Workflow-managed jobs cannot be requeued directly." {
		t.Fatalf("workflow error %+v", e)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 0 {
		t.Fatal("lineage written for a workflow-managed source")
	}
}

func ownBySingleStepWorkflow(t *testing.T, q testdb.Querier, jobID uuid.UUID) {
	t.Helper()
	testdb.OwnByWorkflowStep(t, q, jobID)
}

func TestDisabledOrMissingDefinitionRefusesTheReplayAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	testdb.Exec(t, pool, `UPDATE job_definitions SET is_enabled = false WHERE job_type = 'email'`)

	_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if !errors.Is(err, runledger.CodeDefinitionNotFoundOrDisabled) {
		t.Fatalf("err %v, want definition not found or disabled", err)
	}
	testdb.WantCode(t, err, runledger.CodeDefinitionNotFoundOrDisabled)
	if n := testdb.Count(t, pool, "job_queue"); n != 1 {
		t.Fatalf("%d jobs: the failed replay left a row", n)
	}
	if n := testdb.Count(t, pool, "job_events") + testdb.Count(t, pool, "job_replays"); n != 0 {
		t.Fatal("the failed replay left events or lineage")
	}
	// Enabled again, the same request goes through.
	testdb.Exec(t, pool, `UPDATE job_definitions SET is_enabled = true WHERE job_type = 'email'`)
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
}

func TestRetentionKeepsLineageUntilTheSourceIsDeleted(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	first := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'SUCCEEDED', stage = 'completed' WHERE id = $1`, first.Replay.JobID)

	_, err := pool.Exec(ctx, `DELETE FROM job_queue WHERE id = $1`, first.Replay.JobID)
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) || pgErr.SQLState() != "23503" || !strings.Contains(err.Error(), "fk_job_replays_replay_job") {
		t.Fatalf("deleting only the replay: %v, want 23503 on fk_job_replays_replay_job", err)
	}
	again := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	if again.Disposition != runledger.DispositionExisting || again.Replay.Status != runledger.JobStatusSucceeded {
		t.Fatalf("retry %+v", again)
	}
	tag, err := pool.Exec(ctx, `DELETE FROM job_queue WHERE id = ANY($1)`, []uuid.UUID{sourceID, first.Replay.JobID})
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("deleting both: %v, %d rows", err, tag.RowsAffected())
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 0 {
		t.Fatalf("%d lineage rows after the source was deleted", n)
	}
	// With the source gone the retry is NotFound.
	out, err := replay.SucceededJob(ctx, pool, req)
	if _, ok := out.(replay.NotFound); err != nil || !ok {
		t.Fatalf("retry after deletion: %v %v", out, err)
	}
}
