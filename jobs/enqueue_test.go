package jobs_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestEnqueueWritesPendingJobAndEnqueuedEvent(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{
		Scope:   runledger.Organization(org),
		Payload: json.RawMessage(`{"to": "a@example.com"}`),
	})
	switch {
	case j.ID.Version() != 7:
		t.Fatalf("job id %s is UUID version %d, want 7", j.ID, j.ID.Version())
	case j.Status != runledger.JobStatusPending, j.Stage != runledger.JobStageQueued:
		t.Fatalf("new job = %s %s, want PENDING queued", j.Status, j.Stage)
	case j.RunNumber != 1 || j.Attempt != 0:
		t.Fatalf("run/attempt = %d/%d, want 1/0", j.RunNumber, j.Attempt)
	case j.OrganizationID == nil || *j.OrganizationID != org:
		t.Fatalf("organization = %v, want %s", j.OrganizationID, org)
	case j.IdempotencyKey != nil || j.ExecutionResourceKey != nil:
		t.Fatalf("keys = %v %v, want none", j.IdempotencyKey, j.ExecutionResourceKey)
	}
	var p map[string]any
	if err := json.Unmarshal(j.Payload, &p); err != nil || p["to"] != "a@example.com" {
		t.Fatalf("payload = %s", j.Payload)
	}
	typ, attempt, payload, _ := lastEvent(t, ctx, pool, j.ID)
	if typ != "ENQUEUED" || attempt != nil || len(payload) != 1 || payload["job_type"] != "email" {
		t.Fatalf("event = %s attempt %v payload %v, want ENQUEUED {job_type: email}", typ, attempt, payload)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_queue WHERE id = $1 AND enqueue_request IS NULL`, j.ID); n != 1 {
		t.Fatal("an unkeyed job stored a request snapshot")
	}

	// A nil payload is stored as {}.
	empty := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	if string(empty.Payload) != `{}` {
		t.Fatalf("nil payload stored as %s, want {}", empty.Payload)
	}
}

func TestEnqueueAppliesDefinitionDefaults(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "report", MaxAttempts: testdb.Ptr[int32](5), TimeoutSeconds: testdb.Ptr[int32](60), Priority: testdb.Ptr[int32](7)})
	d := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "report"})
	if d.MaxAttempts != 5 || d.TimeoutSeconds != 60 || d.Priority != 7 {
		t.Fatalf("defaults applied = %d/%d/%d, want 5/60/7", d.MaxAttempts, d.TimeoutSeconds, d.Priority)
	}
	o := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "report", MaxAttempts: testdb.Ptr[int32](2), TimeoutSeconds: testdb.Ptr[int32](30), Priority: testdb.Ptr[int32](-3)})
	if o.MaxAttempts != 2 || o.TimeoutSeconds != 30 || o.Priority != -3 {
		t.Fatalf("overrides applied = %d/%d/%d, want 2/30/-3", o.MaxAttempts, o.TimeoutSeconds, o.Priority)
	}
}

func TestEnqueueMissingOrDisabledDefinitionWritesNothing(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "off", Enabled: testdb.Ptr(false)})
	for _, typ := range []string{"nope", "off"} {
		for _, key := range []string{"", "k1"} {
			_, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: typ, IdempotencyKey: key})
			testdb.WantCode(t, err, runledger.CodeDefinitionNotFoundOrDisabled)
		}
	}
	if n := testdb.Scalar[int](t, pool, `SELECT (SELECT count(*) FROM job_queue) + (SELECT count(*) FROM job_events)`); n != 0 {
		t.Fatalf("%d rows written by refused enqueues", n)
	}
}

func TestEnqueueKeyedSameRequestReturnsExisting(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	runAt := time.Now().Add(-time.Minute)
	req := jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "order-42", Payload: json.RawMessage(`{"a":1,"b":[1,2]}`),
		Priority: testdb.Ptr[int32](3), RunAt: &runAt, ExecutionResourceKey: "acct-9"}
	first, err := jobs.Enqueue(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Disposition != runledger.DispositionInserted || first.Job.IdempotencyKey == nil || *first.Job.IdempotencyKey != "order-42" {
		t.Fatalf("first = %s key %v", first.Disposition, first.Job.IdempotencyKey)
	}
	// The job moves on; a retry returns its current state.
	l := claimOnly(t, ctx, pool, first.Job.ID)

	// The same request with other key order and spacing is the same request.
	retry := req
	retry.Payload = json.RawMessage(`{ "b": [1, 2], "a": 1 }`)
	again, err := jobs.Enqueue(ctx, pool, retry)
	if err != nil {
		t.Fatal(err)
	}
	if again.Disposition != runledger.DispositionExisting || again.Job.ID != first.Job.ID {
		t.Fatalf("retry = %s %s, want existing %s", again.Disposition, again.Job.ID, first.Job.ID)
	}
	if again.Job.Status != runledger.JobStatusLeased || again.Job.Attempt != l.Attempt {
		t.Fatalf("existing job = %s attempt %d, want its current LEASED state", again.Job.Status, again.Job.Attempt)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_queue`); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_events WHERE event_type = 'ENQUEUED'`); n != 1 {
		t.Fatalf("%d ENQUEUED events, want 1", n)
	}
}

func TestEnqueueKeyedDifferentRequestConflicts(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	base := jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "k", Payload: json.RawMessage(`{"n":1}`)}
	testdb.Enqueue(t, ctx, pool, base)
	variants := map[string]func(*jobs.EnqueueRequest){
		"payload":          func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{"n":2}`) },
		"explicit default": func(r *jobs.EnqueueRequest) { r.Priority = testdb.Ptr[int32](100) },
		"max attempts":     func(r *jobs.EnqueueRequest) { r.MaxAttempts = testdb.Ptr[int32](8) },
		"run at":           func(r *jobs.EnqueueRequest) { r.RunAt = testdb.Ptr(time.Now()) },
		"resource key":     func(r *jobs.EnqueueRequest) { r.ExecutionResourceKey = "x" },
	}
	for name, change := range variants {
		req := base
		change(&req)
		_, err := jobs.Enqueue(ctx, pool, req)
		if !isConflict(err) {
			t.Errorf("%s changed: err = %v, want %s", name, err, runledger.CodeIdempotencyConflict)
		}
	}
	if n := testdb.Scalar[int](t, pool, `SELECT (SELECT count(*) FROM job_queue) + (SELECT count(*) FROM job_events)`); n != 2 {
		t.Fatalf("rows = %d, want the one job and its one event", n)
	}
}

func isConflict(err error) bool {
	return runledger.CodeOf(err) == runledger.CodeIdempotencyConflict &&
		runledger.CategoryOf(err) == runledger.CategoryConflict
}

func TestEnqueueKeyedScopesKeepSeparateJobs(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "sms"})
	orgA, orgB := uuid.New(), uuid.New()
	reqs := []jobs.EnqueueRequest{
		{Scope: runledger.Global(), IdempotencyKey: "same"},
		{Scope: runledger.Organization(orgA), IdempotencyKey: "same"},
		{Scope: runledger.Organization(orgB), IdempotencyKey: "same"},
		{Scope: runledger.Organization(orgA), IdempotencyKey: "same", JobType: "sms"},
	}
	seen := map[uuid.UUID]bool{}
	for i, req := range reqs {
		j := testdb.Enqueue(t, ctx, pool, req)
		if seen[j.ID] {
			t.Fatalf("request %d got an earlier job", i)
		}
		seen[j.ID] = true
		if j.Scope() != req.Scope {
			t.Fatalf("request %d: job scope %s, want %s", i, j.Scope(), req.Scope)
		}
	}
	// Each scope's retry finds its own job.
	for i, req := range reqs {
		if req.JobType == "" {
			req.JobType = "email"
		}
		res, err := jobs.Enqueue(ctx, pool, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Disposition != runledger.DispositionExisting || res.Job.Scope() != req.Scope || res.Job.JobType != req.JobType {
			t.Fatalf("retry %d = %s %s %s", i, res.Disposition, res.Job.Scope(), res.Job.JobType)
		}
	}
}

func TestEnqueueKeyedTxRefusesRepeatableRead(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		if err != nil {
			t.Fatal(err)
		}
		_, err = jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "k"})
		testdb.WantCode(t, err, runledger.CodeEnqueueUnsupportedIsolation)
		_, err = jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email", JobID: uuid.Must(uuid.NewV7())})
		testdb.WantCode(t, err, runledger.CodeEnqueueUnsupportedIsolation)
		// Unkeyed is one statement and needs no particular isolation.
		if _, err := jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email"}); err != nil {
			t.Fatalf("unkeyed enqueue under %s: %v", iso, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "k"}); err != nil {
		t.Fatalf("keyed enqueue under READ COMMITTED: %v", err)
	}
}

// A read-only caller transaction is refused with the isolation code at
// once, and is left usable: the refusal ran no statement that could fail.
func TestEnqueueKeyedTxRefusesReadOnly(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "k"})
	if e := testdb.WantCode(t, err, runledger.CodeEnqueueUnsupportedIsolation); !strings.Contains(e.Detail, "read-only") {
		t.Fatalf("detail %q", e.Detail)
	}
	if n := testdb.Scalar[int64](t, tx, `SELECT count(*) FROM job_queue`); n != 0 {
		t.Fatalf("caller's transaction reads %d jobs", n)
	}
}

func TestEnqueueKeyedWaitsForUncommittedCompetitor(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	req := jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "race"}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	mine, err := jobs.EnqueueTx(ctx, tx, req)
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		res jobs.EnqueueResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := jobs.Enqueue(ctx, pool, req)
		done <- result{res, err}
	}()
	testdb.WaitBlocked(t, pool, 0)
	select {
	case r := <-done:
		t.Fatalf("competing enqueue returned while the first was uncommitted: %+v", r)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Disposition != runledger.DispositionExisting || r.res.Job.ID != mine.Job.ID {
		t.Fatalf("competitor got %s %s, want existing %s", r.res.Disposition, r.res.Job.ID, mine.Job.ID)
	}
}

func TestEnqueueKeyedCompetitorRolledBackInsertsItsOwn(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	req := jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "race"}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	mine, err := jobs.EnqueueTx(ctx, tx, req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan jobs.EnqueueResult, 1)
	errs := make(chan error, 1)
	go func() {
		res, err := jobs.Enqueue(ctx, pool, req)
		if err != nil {
			errs <- err
			return
		}
		done <- res
	}()
	testdb.WaitBlocked(t, pool, 0)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	case res := <-done:
		if res.Disposition != runledger.DispositionInserted || res.Job.ID == mine.Job.ID {
			t.Fatalf("after the competitor rolled back got %s %s, want a new inserted job", res.Disposition, res.Job.ID)
		}
	}
}

func TestConcurrentKeyedEnqueuesMakeOneJob(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	const n = 8
	var wg sync.WaitGroup
	results := make(chan jobs.EnqueueResult, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "once", Payload: json.RawMessage(`{"x":1}`)})
			if err != nil {
				errs <- err
				return
			}
			results <- res
		}()
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	inserted, ids := 0, map[uuid.UUID]bool{}
	for r := range results {
		ids[r.Job.ID] = true
		if r.Disposition == runledger.DispositionInserted {
			inserted++
		}
	}
	if inserted != 1 || len(ids) != 1 {
		t.Fatalf("%d inserted, %d distinct jobs; want 1 and 1", inserted, len(ids))
	}
}

func TestEnqueueKeyedExistingLocksJobForNoKeyUpdate(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	req := jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "held"}
	j := testdb.Enqueue(t, ctx, pool, req)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := jobs.EnqueueTx(ctx, tx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Disposition != runledger.DispositionExisting {
		t.Fatalf("disposition = %s", res.Disposition)
	}
	if !testdb.RowLocked(t, pool, "job_queue", "id = $1", j.ID, "UPDATE") {
		t.Fatal("existing job is not locked against FOR UPDATE")
	}
	if testdb.RowLocked(t, pool, "job_queue", "id = $1", j.ID, "KEY SHARE") {
		t.Fatal("existing job is locked against KEY SHARE: stronger than FOR NO KEY UPDATE")
	}
	// Claims pass it by while the transaction lasts.
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v while the keyed retry held it", testdb.IDs(got))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	claimOnly(t, ctx, pool, j.ID)
}

func TestEnqueueHoldsDefinitionForShare(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{JobType: "email"}); err != nil {
		t.Fatal(err)
	}
	// On Citus the share lock is on the placement of the reference table on
	// the tenant's node, which a probe through the coordinator need not
	// reach; a definition change writes every placement, so the wait below
	// is what both engines promise.
	if !testdb.Citus() {
		if !testdb.RowLocked(t, pool, "job_definitions", "job_type = $1", "email", "NO KEY UPDATE") {
			t.Fatal("definition row is not share-locked during the enqueue's transaction")
		}
		if testdb.RowLocked(t, pool, "job_definitions", "job_type = $1", "email", "SHARE") {
			t.Fatal("definition row is locked more strongly than FOR SHARE")
		}
	}

	// A definition change waits for the enqueuing transaction.
	changed := make(chan error, 1)
	go func() {
		_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "email", Priority: testdb.Ptr[int32](1)})
		changed <- err
	}()
	testdb.WaitBlocked(t, pool, 0)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueStoresEscapedJSON(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	// A surrogate pair, other escapes and a non-object value are storable.
	for _, payload := range []string{`{"s":"\ud83d\ude00 \n \\u0000 \u00e9"}`, `[1,2,3]`, `"text"`, `null`} {
		j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Payload: json.RawMessage(payload)})
		var got, want any
		if err := json.Unmarshal(j.Payload, &got); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(payload), &want)
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if string(gb) != string(wb) {
			t.Fatalf("payload %s stored as %s", payload, j.Payload)
		}
	}
}

// The context of a canceled enqueue is reported as transient and nothing
// is written.
func TestEnqueueCanceledContextWritesNothing(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: "email", IdempotencyKey: "k"})
	if err == nil || runledger.CategoryOf(err) != runledger.CategoryTransient {
		t.Fatalf("err = %v, want a transient error", err)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_queue`); n != 0 {
		t.Fatalf("%d jobs written", n)
	}
}
