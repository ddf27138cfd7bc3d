package replay_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// ledgerCounts is the number of rows of every table a replay writes.
func ledgerCounts(t *testing.T, q testdb.Querier) string {
	t.Helper()
	return fmt.Sprint(testdb.Count(t, q, "job_queue"), testdb.Count(t, q, "job_events"), testdb.Count(t, q, "job_replays"))
}

type bulkBlocker struct{}

// TestBulkConcurrentIdenticalActionsReplayEachSourceOnce runs the same
// action twice at once, the first holding its first chunk's locks until
// the second waits on them: every source is replayed exactly once, and
// neither action fails.
func TestBulkConcurrentIdenticalActionsReplayEachSourceOnce(t *testing.T) {
	ctx := testdb.Context(t)
	url := testdb.NewURL(t)
	admin := testdb.OpenPool(t, url, 4, nil)
	poolA := testdb.OpenPool(t, url, 2, map[string]string{"application_name": "bulk-a"})
	poolB := testdb.OpenPool(t, url, 2, map[string]string{"application_name": "bulk-b"})
	scope := runledger.Organization(uuid.New())
	ids := seedSucceeded(t, admin, scope, "email", 200, time.Now().Add(-time.Hour))
	req := replay.BulkRequest{Scope: scope, Key: "twice", Reason: "r", Sources: listOf(ids, 1), ChunkSize: 50}

	// A, at its first chunk's lock, waits until B waits on a lock.
	defer failpoint.EnableFor(replay.FailpointBulkAfterLock, func(ctx context.Context, arg any) {
		if ctx.Value(bulkBlocker{}) == nil || arg.(replay.BulkCall).Chunk != 0 {
			return
		}
		testdb.WaitFor(t, "bulk B to wait on A's locks", func() bool {
			return testdb.Scalar[bool](t, admin, `
				SELECT EXISTS (SELECT 1 FROM (`+testdb.WaitersSQL()+`) w JOIN pg_stat_activity a USING (pid)
				               WHERE a.application_name = 'bulk-b')`)
		})
	}, func(ctx context.Context) bool { return ctx.Value(bulkBlocker{}) != nil })()

	var wg sync.WaitGroup
	var sumA, sumB replay.BulkSummary
	var errA, errB error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sumA, errA = replay.Bulk(context.WithValue(ctx, bulkBlocker{}, true), poolA, req, nil)
	}()
	testdb.WaitFor(t, "bulk A to hold its first chunk", func() bool {
		return testdb.Scalar[bool](t, admin, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'bulk-a' AND state = 'idle in transaction')`)
	})
	sumB, errB = replay.Bulk(ctx, poolB, req, nil)
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("bulk A: %v; bulk B: %v", errA, errB)
	}
	for name, s := range map[string]replay.BulkSummary{"A": sumA, "B": sumB} {
		if s.Selected != 200 || s.Inserted+s.Existing != 200 {
			t.Fatalf("bulk %s: %+v, want 200 inserted or existing", name, s)
		}
	}
	if sumA.Inserted+sumB.Inserted != 200 || sumB.Existing < 50 {
		t.Fatalf("inserted %d + %d, want 200 in all; B found %d existing, want at least A's first chunk", sumA.Inserted, sumB.Inserted, sumB.Existing)
	}
	assertReplayedOnce(t, admin, req.Key, ids)
}

// TestBulkBesideSixteenSingleReplays runs one bulk action beside 16
// goroutines replaying the same sources one by one with the same key and
// reason, in the opposite order: each source is replayed exactly once and
// no call fails (no deadlock).
func TestBulkBesideSixteenSingleReplays(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	url := testdb.NewURL(t)
	pool := testdb.OpenPool(t, url, 20, nil)
	scope := runledger.Organization(uuid.New())
	ids := seedSucceeded(t, pool, scope, "email", 320, time.Now().Add(-time.Hour))
	const key, reason = "incident", "r"

	var wg sync.WaitGroup
	inserted := make([]int, 17)
	errc := make(chan error, 17)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Worker w replays sources w, w+16, ... from the end, so the
			// singles meet the bulk's id order head on.
			for i := len(ids) - 1 - w; i >= 0; i -= 16 {
				out, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: ids[i], ExpectedRunNumber: 1, Key: key, Reason: reason})
				if err != nil {
					errc <- fmt.Errorf("single %s: %w", ids[i], err)
					return
				}
				if r, ok := out.(replay.Replayed); !ok {
					errc <- fmt.Errorf("single %s: %T", ids[i], out)
					return
				} else if r.Disposition == runledger.DispositionInserted {
					inserted[w]++
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		sum, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: key, Reason: reason, Sources: listOf(ids, 1), ChunkSize: 40}, nil)
		if err != nil {
			errc <- fmt.Errorf("bulk: %w", err)
			return
		}
		if sum.Inserted+sum.Existing != len(ids) {
			errc <- fmt.Errorf("bulk: %+v", sum)
		}
		inserted[16] = sum.Inserted
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(testdb.Detail(err))
	}
	total := 0
	for _, n := range inserted {
		total += n
	}
	if total != len(ids) {
		t.Fatalf("%d replays inserted in all (bulk %d), want %d", total, inserted[16], len(ids))
	}
	assertReplayedOnce(t, pool, key, ids)
}

// TestBulkFilterStaysInItsScope seeds the same job type in two
// organizations and the global scope: a filter selects, counts and
// replays only its own scope's jobs, and a list naming another scope's
// job gets not_found.
func TestBulkFilterStaysInItsScope(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	orgA, orgB := runledger.Organization(uuid.New()), runledger.Organization(uuid.New())
	finished := time.Now().Add(-time.Hour)
	a := seedSucceeded(t, pool, orgA, "invoice.send", 7, finished)
	b := seedSucceeded(t, pool, orgB, "invoice.send", 5, finished)
	g := seedSucceeded(t, pool, runledger.Global(), "invoice.send", 3, finished)

	for _, tc := range []struct {
		name  string
		scope runledger.Scope
		want  []uuid.UUID
	}{{"org A", orgA, a}, {"org B", orgB, b}, {"global", runledger.Global(), g}} {
		req := replay.BulkRequest{Scope: tc.scope, Key: "scoped", Reason: "r", Filter: &replay.Filter{JobType: "invoice.send"}, ChunkSize: 2}
		n, err := replay.BulkCount(ctx, pool, req)
		if err != nil || n != len(tc.want) {
			t.Fatalf("%s: BulkCount %d, %v; want %d", tc.name, n, err, len(tc.want))
		}
		req.DryRun = true
		_, dry := collect(t, ctx, pool, req)
		req.DryRun = false
		sum, results := collect(t, ctx, pool, req)
		if sum.Selected != len(tc.want) || sum.Inserted != len(tc.want) || len(dry) != len(tc.want) {
			t.Fatalf("%s: %+v (dry run %d results), want %d inserted", tc.name, sum, len(dry), len(tc.want))
		}
		got := map[uuid.UUID]bool{}
		for _, r := range results {
			got[r.SourceJobID] = true
		}
		for _, id := range tc.want {
			if !got[id] {
				t.Fatalf("%s: own job %s not selected", tc.name, id)
			}
		}
		if n := testdb.Scalar[int64](t, pool, `
			SELECT count(*) FROM job_replays jr JOIN job_queue s ON s.organization_id = jr.organization_id AND s.id = jr.source_job_id
			WHERE jr.replay_request_key = 'scoped' AND s.organization_id <> $1`, testdb.Tenant(tc.scope)); n != 0 {
			t.Fatalf("%s: %d replays of other scopes' jobs", tc.name, n)
		}
		testdb.Exec(t, pool, `DELETE FROM job_replays WHERE replay_request_key = 'scoped'`)
	}

	// A list naming B's and a global job in A's scope: not found, and
	// nothing of them is written or revealed.
	sum, results := collect(t, ctx, pool, replay.BulkRequest{Scope: orgA, Key: "list", Reason: "r",
		Sources: []replay.Source{{JobID: b[0], ExpectedRunNumber: 1}, {JobID: g[0], ExpectedRunNumber: 1}, {JobID: a[0], ExpectedRunNumber: 1}}})
	if sum.NotFound != 2 || sum.Inserted != 1 || results[0].Result != replay.BulkNotFound || results[1].Result != replay.BulkNotFound || results[0].ReplayJobID != nil {
		t.Fatalf("list across scopes: %+v %+v", sum, results)
	}
}

// TestBulkFilterWindowLimitAndOrder checks the half-open window on
// finished_at, the limit, the finish order across chunks, and that a
// filter matching nothing is a zero summary.
func TestBulkFilterWindowLimitAndOrder(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	scope := runledger.Organization(uuid.New())
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var window []uuid.UUID
	// Finished 08:59, 09:00, ..., 11:00 (in reverse creation order, so id
	// order and finish order differ).
	var all []uuid.UUID
	for m := 121; m >= -1; m -= 10 {
		all = append(all, seedSucceeded(t, pool, scope, "invoice.send", 1, base.Add(time.Duration(m)*time.Minute))[0])
	}
	for i := len(all) - 1; i >= 0; i-- { // finish order
		m := 121 - 10*i
		if m >= 0 && m < 120 {
			window = append(window, all[i])
		}
	}
	seedSucceeded(t, pool, scope, "other.type", 3, base.Add(time.Minute))
	since, until := base, base.Add(2*time.Hour)
	filter := &replay.Filter{JobType: "invoice.send", SucceededSince: &since, SucceededUntil: &until}

	req := replay.BulkRequest{Scope: scope, Key: "window", Reason: "r", Filter: filter, ChunkSize: 5}
	req.DryRun = true
	if n, err := replay.BulkCount(ctx, pool, req); err != nil || n != len(window) {
		t.Fatalf("BulkCount %d, %v; want %d", n, err, len(window))
	}
	var got []uuid.UUID
	chunks := 0
	sum, err := replay.Bulk(ctx, pool, req, func(c replay.BulkChunk) error {
		chunks++
		for _, r := range c.Results {
			got = append(got, r.SourceJobID)
		}
		return nil
	})
	if err != nil || sum.Inserted != len(window) {
		t.Fatalf("dry run %+v, %v", sum, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(window) || chunks != (len(window)+4)/5 {
		t.Fatalf("selected %v in %d chunks\nwant     %v", got, chunks, window)
	}

	limited := *filter
	limited.Limit = 7
	req = replay.BulkRequest{Scope: scope, Key: "window", Reason: "r", Filter: &limited, ChunkSize: 5}
	if n, _ := replay.BulkCount(ctx, pool, req); n != 7 {
		t.Fatalf("BulkCount with limit 7: %d", n)
	}
	sum, results := collect(t, ctx, pool, req)
	if sum.Inserted != 7 || results[6].SourceJobID != window[6] {
		t.Fatalf("limit 7: %+v", sum)
	}
	// The rest of the window, then nothing: the action's own replays (none
	// SUCCEEDED here) and what it replayed are never selected twice.
	sum, _ = collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: "window", Reason: "r", Filter: filter})
	if sum.Inserted != len(window)-7 || sum.Existing != 7 {
		t.Fatalf("rest of the window: %+v", sum)
	}

	empty := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	emptyUntil := empty.Add(time.Hour)
	before := ledgerCounts(t, pool)
	sum, results = collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: "none", Reason: "r",
		Filter: &replay.Filter{JobType: "invoice.send", SucceededSince: &empty, SucceededUntil: &emptyUntil}})
	if sum != (replay.BulkSummary{}) || len(results) != 0 || ledgerCounts(t, pool) != before {
		t.Fatalf("a filter matching nothing: %+v, %d results", sum, len(results))
	}
}

// TestBulkFilterNeverReplaysItsOwnReplays lets a replay made by the action
// succeed inside the open window: running the action again selects the
// source (existing) but not the replay.
func TestBulkFilterNeverReplaysItsOwnReplays(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	scope := runledger.Global()
	seedSucceeded(t, pool, scope, "email", 3, time.Now().Add(-time.Hour))
	req := replay.BulkRequest{Scope: scope, Key: "own", Reason: "r", Filter: &replay.Filter{JobType: "email"}}
	if sum, _ := collect(t, ctx, pool, req); sum.Inserted != 3 {
		t.Fatalf("first run %+v", sum)
	}
	testdb.Exec(t, pool, `
		UPDATE job_queue SET status = 'SUCCEEDED', stage = 'completed', attempt = 1, finished_at = now()
		WHERE id IN (SELECT replay_job_id FROM job_replays)`)
	if sum, _ := collect(t, ctx, pool, req); sum.Selected != 3 || sum.Existing != 3 {
		t.Fatalf("rerun %+v, want the 3 sources existing and no replay selected", sum)
	}
	// Under another key the replays are jobs like any other.
	req.Key = "other"
	if sum, _ := collect(t, ctx, pool, req); sum.Selected != 6 {
		t.Fatalf("another key %+v, want 6 selected", sum)
	}
}

// TestBulkRefusesBadInputAndWritesNothing checks every validation error,
// on a closed pool (nothing is sent) and on a live one (nothing written).
func TestBulkRefusesBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	closed := testdb.ClosedPool(t)
	scope := runledger.Global()
	ids := seedSucceeded(t, pool, scope, "email", 2, time.Now().Add(-time.Hour))
	before := ledgerCounts(t, pool)
	now := time.Now()
	later := now.Add(time.Hour)
	list := listOf(ids, 1)
	filter := func(f replay.Filter) *replay.Filter { return &f }
	ok := replay.BulkRequest{Scope: scope, Key: "k", Reason: "r", Sources: list}
	with := func(change func(*replay.BulkRequest)) replay.BulkRequest {
		r := ok
		change(&r)
		return r
	}
	for _, tc := range []struct {
		code runledger.Code
		req  replay.BulkRequest
	}{
		{"job.replay_request_key_blank", with(func(r *replay.BulkRequest) { r.Key = " \t" })},
		{"job.replay_request_key_invalid", with(func(r *replay.BulkRequest) { r.Key = "a\x00b" })},
		{"job.replay_request_key_too_long", with(func(r *replay.BulkRequest) { r.Key = strings.Repeat("k", runledger.MaxKeyBytes+1) })},
		{"job.replay_reason_blank", with(func(r *replay.BulkRequest) { r.Reason = "" })},
		{"job.replay_reason_invalid", with(func(r *replay.BulkRequest) { r.Reason = "\xff" })},
		{"job.replay_reason_too_long", with(func(r *replay.BulkRequest) { r.Reason = strings.Repeat("r", replay.MaxReasonBytes+1) })},
		{"job.replay_bulk_selection_invalid", with(func(r *replay.BulkRequest) { r.Sources = nil })},
		{"job.replay_bulk_selection_invalid", with(func(r *replay.BulkRequest) { r.Filter = &replay.Filter{JobType: "email"} })},
		{"job.replay_bulk_sources_empty", with(func(r *replay.BulkRequest) { r.Sources = []replay.Source{} })},
		{"job.replay_bulk_duplicate_source", with(func(r *replay.BulkRequest) {
			r.Sources = append(list, replay.Source{JobID: ids[0], ExpectedRunNumber: 2})
		})},
		{"job.job_type_blank", with(func(r *replay.BulkRequest) { r.Sources, r.Filter = nil, &replay.Filter{} })},
		{"job.job_type_invalid", with(func(r *replay.BulkRequest) { r.Sources, r.Filter = nil, &replay.Filter{JobType: "e\x00"} })},
		{"job.job_type_too_long", with(func(r *replay.BulkRequest) {
			r.Sources, r.Filter = nil, &replay.Filter{JobType: strings.Repeat("t", 256)}
		})},
		{"job.replay_bulk_range_invalid", with(func(r *replay.BulkRequest) {
			r.Sources, r.Filter = nil, filter(replay.Filter{JobType: "email", SucceededSince: &later, SucceededUntil: &now})
		})},
		{"job.replay_bulk_range_invalid", with(func(r *replay.BulkRequest) {
			r.Sources, r.Filter = nil, filter(replay.Filter{JobType: "email", SucceededSince: &now, SucceededUntil: &now})
		})},
		{"job.replay_bulk_limit_invalid", with(func(r *replay.BulkRequest) { r.Sources, r.Filter = nil, &replay.Filter{JobType: "email", Limit: -1} })},
		{"job.replay_bulk_chunk_invalid", with(func(r *replay.BulkRequest) { r.ChunkSize = -1 })},
		{"job.replay_bulk_rate_invalid", with(func(r *replay.BulkRequest) { r.Rate = -5 })},
	} {
		for _, p := range []*pgxpool.Pool{closed, pool} {
			called := false
			_, err := replay.Bulk(ctx, p, tc.req, func(replay.BulkChunk) error { called = true; return nil })
			e := testdb.WantCode(t, err, tc.code)
			if e.Category != runledger.CategoryValidation || called {
				t.Fatalf("%s: category %s, onChunk called %v", tc.code, e.Category, called)
			}
			if _, err := replay.BulkCount(ctx, p, tc.req); !errors.Is(err, tc.code) {
				t.Fatalf("BulkCount: %v, want %s", err, tc.code)
			}
		}
	}
	if got := ledgerCounts(t, pool); got != before {
		t.Fatalf("rows %s after refused requests, want %s", got, before)
	}
	// Zero chunk size, rate and limit are the defaults, not errors.
	if err := (replay.BulkRequest{Scope: scope, Key: "k", Reason: "r", Filter: &replay.Filter{JobType: "email"}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestBulkDryRunWritesNothingAndReportsTheRealRun runs a mixed selection
// dry, then for real, then again: the dry run reports what the real run
// then does, writes nothing and leaves no lock; the rerun reports every
// replay existing, with the same ids.
func TestBulkDryRunWritesNothingAndReportsTheRealRun(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	scope := runledger.Organization(uuid.New())
	ids := seedSucceeded(t, pool, scope, "email", 12, time.Now().Add(-time.Hour))
	testdb.Exec(t, pool, `UPDATE job_queue SET run_number = 2 WHERE id = $1`, ids[3])
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: ids[5], ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: ids[6], ExpectedRunNumber: 1, Key: "k", Reason: "other"}))
	srcs := append(listOf(ids, 1), replay.Source{JobID: uuid.New(), ExpectedRunNumber: 1})
	req := replay.BulkRequest{Scope: scope, Key: "k", Reason: "r", Sources: srcs, ChunkSize: 4, DryRun: true}

	before := ledgerCounts(t, pool)
	drySum, dry := collect(t, ctx, pool, req)
	if got := ledgerCounts(t, pool); got != before {
		t.Fatalf("dry run wrote rows: %s, was %s", got, before)
	}
	for _, id := range ids {
		if l := probeRowLocks(t, pool, id); !l.unlocked() {
			t.Fatalf("dry run left source %s locked", id)
		}
	}
	want := replay.BulkSummary{Selected: 13, Inserted: 9, Existing: 1, Conflict: 1, Mismatch: 1, NotFound: 1}
	if drySum != want {
		t.Fatalf("dry run %+v, want %+v", drySum, want)
	}
	req.DryRun = false
	realSum, real := collect(t, ctx, pool, req)
	if realSum != drySum {
		t.Fatalf("real run %+v, dry run %+v", realSum, drySum)
	}
	for i := range real {
		if real[i].Result != dry[i].Result || real[i].SourceJobID != dry[i].SourceJobID {
			t.Fatalf("source %d: real %+v, dry %+v", i, real[i], dry[i])
		}
	}
	again, rerun := collect(t, ctx, pool, req)
	if again != (replay.BulkSummary{Selected: 13, Existing: 10, Conflict: 1, Mismatch: 1, NotFound: 1}) {
		t.Fatalf("rerun %+v", again)
	}
	for i := range rerun {
		switch r := real[i]; r.Result {
		case replay.BulkInserted, replay.BulkExisting:
			if rerun[i].Result != replay.BulkExisting || rerun[i].ReplayJobID == nil || *rerun[i].ReplayJobID != *r.ReplayJobID {
				t.Fatalf("source %d: %s as %v, rerun reports %s as %v", i, r.Result, r.ReplayJobID, rerun[i].Result, rerun[i].ReplayJobID)
			}
		default:
			if rerun[i].Result != r.Result {
				t.Fatalf("source %d: %s, rerun reports %s", i, r.Result, rerun[i].Result)
			}
		}
	}
	if got, want := testdb.Count(t, pool, "job_replays"), int64(11); got != want {
		t.Fatalf("%d lineage rows, want %d", got, want)
	}
}

// TestBulkCancelStopsAfterTheChunk cancels the context in onChunk: the
// action stops with an error wrapping context.Canceled, the reported
// chunk stays committed and nothing after it is written.
func TestBulkCancelStopsAfterTheChunk(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	scope := runledger.Global()
	ids := seedSucceeded(t, pool, scope, "email", 9, time.Now().Add(-time.Hour))
	ctx, cancel := context.WithCancel(testdb.Context(t))
	defer cancel()
	sum, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: "k", Reason: "r", Sources: listOf(ids, 1), ChunkSize: 4},
		func(c replay.BulkChunk) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) || sum.Inserted != 4 {
		t.Fatalf("canceled bulk: %+v, %v", sum, err)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 4 {
		t.Fatalf("%d lineage rows, want the first chunk's 4", n)
	}
	stop := errors.New("stop")
	sum, err = replay.Bulk(testdb.Context(t), pool, replay.BulkRequest{Scope: scope, Key: "k", Reason: "r", Sources: listOf(ids, 1), ChunkSize: 4},
		func(c replay.BulkChunk) error { return stop })
	if !errors.Is(err, stop) || sum.Selected != 4 || sum.Existing != 4 {
		t.Fatalf("onChunk error: %+v, %v", sum, err)
	}
}

type rateMarker struct{}

// TestBulkRateIsATokenBucketFromTheLastInsert resumes a throttled action
// (20 per second) over 2,000 sources already replayed, then 60 new ones,
// of which one chunk's 20 change under the chunk and are replayed on
// their own: walking the existing sources waits for nothing and builds no
// credit, and the replays' created_at, as the database wrote them, never
// burst beyond the bucket: at most 20 + 20/s × span in any span.
func TestBulkRateIsATokenBucketFromTheLastInsert(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), rateMarker{}, true)
	pool := testdb.New(t)
	scope := runledger.Global()
	done := seedSucceeded(t, pool, scope, "email", 2000, time.Now().Add(-time.Hour))
	fresh := seedSucceeded(t, pool, scope, "email", 60, time.Now().Add(-time.Hour))
	const key, rate = "resume", 20
	if sum, _ := collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: key, Reason: "r", Sources: listOf(done, 1)}); sum.Inserted != 2000 {
		t.Fatalf("first run %+v", sum)
	}
	// The second chunk of new sources (chunk 101) is PENDING when the chunk
	// locks and SUCCEEDED again when it classifies: the single replay does
	// each of its 20.
	changing := fresh[20:40]
	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'PENDING' WHERE id = ANY($1)`, changing)
	mine := func(ctx context.Context) bool { return ctx.Value(rateMarker{}) != nil }
	defer failpoint.EnableFor(replay.FailpointBulkAfterLock, func(ctx context.Context, arg any) {
		if c := arg.(replay.BulkCall); mine(ctx) && c.Chunk == 101 && c.Attempt == 1 {
			testdb.Exec(t, pool, `UPDATE job_queue SET status = 'SUCCEEDED' WHERE id = ANY($1)`, changing)
		}
	}, mine)()

	var sizes []int
	started := time.Now()
	sum, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: key, Reason: "r", Sources: listOf(append(done, fresh...), 1), Rate: rate},
		func(c replay.BulkChunk) error {
			sizes = append(sizes, len(c.Results))
			return nil
		})
	if err != nil || sum.Existing != 2000 || sum.Inserted != 60 {
		t.Fatalf("throttled rerun %+v, %v", sum, err)
	}
	if len(sizes) != 103 || sizes[0] != rate {
		t.Fatalf("chunk sizes %v, want 103 chunks of %d", sizes, rate)
	}
	created := testdb.Column[time.Time](t, pool, `
		SELECT q.created_at FROM job_replays r JOIN job_queue q ON q.organization_id = r.organization_id AND q.id = r.replay_job_id
		WHERE r.replay_request_key = $1 AND r.source_job_id = ANY($2) ORDER BY q.created_at`, key, fresh)
	if len(created) != 60 {
		t.Fatalf("%d replays of the new sources, want 60", len(created))
	}
	if created[0].Before(started.Add(-time.Second)) {
		t.Fatalf("first replay at %s, before the action began (%s)", created[0], started)
	}
	// The bucket: n replays within a span of s seconds need n <= 20 + 20 s.
	// The tolerance covers the rounding of the database's clock.
	const tolerance = 2 * time.Millisecond
	for i := range created {
		for j := i + rate; j < len(created); j++ {
			span := created[j].Sub(created[i]) + tolerance
			if n := j - i + 1; float64(n) > rate+rate*span.Seconds() {
				t.Fatalf("replays %d to %d (%d of them) within %s: a burst beyond the bucket of %d at %d/s",
					i, j, n, created[j].Sub(created[i]), rate, rate)
			}
		}
	}
}

type retryMarker struct{}

// TestBulkSourceThatChangesUnderTheChunkIsReplayedOnItsOwn changes sources
// between a chunk's unlocked reads and its lock: a list source that became
// eligible after the lock passed it by, and a filter's source whose run
// moved on after the page was selected, are each replayed by the single
// replay's lock loop (at the run it has then, for the filter); a dry run
// takes the same path and writes nothing.
func TestBulkSourceThatChangesUnderTheChunkIsReplayedOnItsOwn(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), retryMarker{}, true)
	pool := testdb.New(t)
	scope := runledger.Organization(uuid.New())
	ids := seedSucceeded(t, pool, scope, "email", 3, time.Now().Add(-time.Hour))
	mine := func(ctx context.Context) bool { return ctx.Value(retryMarker{}) != nil }

	// List: ids[1] is PENDING when the chunk locks, SUCCEEDED again when the
	// chunk classifies it.
	for _, dry := range []bool{true, false} {
		testdb.Exec(t, pool, `UPDATE job_queue SET status = 'PENDING' WHERE id = $1`, ids[1])
		disable := failpoint.EnableFor(replay.FailpointBulkAfterLock, func(ctx context.Context, _ any) {
			if mine(ctx) {
				testdb.Exec(t, pool, `UPDATE job_queue SET status = 'SUCCEEDED' WHERE id = $1`, ids[1])
			}
		}, mine)
		before := ledgerCounts(t, pool)
		sum, results := collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: "list", Reason: "r", Sources: listOf(ids, 1), DryRun: dry})
		disable()
		if sum.Inserted != 3 || results[1].Result != replay.BulkInserted || results[1].SourceRunNumber != 1 {
			t.Fatalf("dry run %v: %+v %+v", dry, sum, results)
		}
		if dry && ledgerCounts(t, pool) != before {
			t.Fatal("the dry run's own replay of a changed source wrote rows")
		}
	}
	assertReplayedOnce(t, pool, "list", ids)

	// Filter: ids[2] runs again and succeeds at run 2 between the page
	// selection and the lock.
	disable := failpoint.EnableFor(replay.FailpointBulkAfterSelect, func(ctx context.Context, _ any) {
		if mine(ctx) {
			testdb.Exec(t, pool, `UPDATE job_queue SET run_number = 2 WHERE id = $1`, ids[2])
		}
	}, mine)
	sum, results := collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: "filter", Reason: "r", Filter: &replay.Filter{JobType: "email"}})
	disable()
	if sum.Inserted != 3 || len(results) != 3 {
		t.Fatalf("filter: %+v %+v", sum, results)
	}
	for _, r := range results {
		if want := int32(map[bool]int{true: 2, false: 1}[r.SourceJobID == ids[2]]); r.SourceRunNumber != want || r.Result != replay.BulkInserted {
			t.Fatalf("filter result %+v, want inserted at run %d", r, want)
		}
	}
	if run := testdb.Scalar[int32](t, pool, `SELECT source_run_number FROM job_replays WHERE source_job_id = $1 AND replay_request_key = 'filter'`, ids[2]); run != 2 {
		t.Fatalf("lineage of the moved source at run %d, want 2", run)
	}
}

type pinMarker struct{}

// TestBulkOpenFilterPinsItsUpperBound lets three jobs of the type succeed
// after an open-ended filter's first chunk: they are not selected (nor
// counted), every chunk reports the same bound, the database's time at
// the first page, and a rerun with that bound is exactly the action
// again, while a new open run selects them.
func TestBulkOpenFilterPinsItsUpperBound(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), pinMarker{}, true)
	pool := testdb.New(t)
	scope := runledger.Organization(uuid.New())
	seedSucceeded(t, pool, scope, "email", 6, time.Now().Add(-time.Hour))
	late := seedSucceeded(t, pool, scope, "email", 3, time.Now().Add(-time.Hour))
	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'PENDING', stage = 'queued', finished_at = NULL WHERE id = ANY($1)`, late)
	mine := func(ctx context.Context) bool { return ctx.Value(pinMarker{}) != nil }
	disable := failpoint.EnableFor(replay.FailpointBulkAfterChunk, func(ctx context.Context, arg any) {
		if mine(ctx) && arg.(replay.BulkCall).Chunk == 0 {
			testdb.Exec(t, pool, `UPDATE job_queue SET status = 'SUCCEEDED', stage = 'completed', finished_at = now() WHERE id = ANY($1)`, late)
		}
	}, mine)
	req := replay.BulkRequest{Scope: scope, Key: "open", Reason: "r", Filter: &replay.Filter{JobType: "email"}, ChunkSize: 2, Count: true}
	var bounds []time.Time
	var expected []int
	sum, err := replay.Bulk(ctx, pool, req, func(c replay.BulkChunk) error {
		if c.SucceededUntil == nil {
			return fmt.Errorf("chunk %d reports no bound", c.Index)
		}
		bounds = append(bounds, *c.SucceededUntil)
		expected = append(expected, c.Expected)
		return nil
	})
	disable()
	if err != nil || sum.Selected != 6 || sum.Inserted != 6 {
		t.Fatalf("open filter: %+v, %v; want the 6 jobs that had succeeded when it began", sum, err)
	}
	if len(bounds) != 3 || !bounds[0].Equal(bounds[1]) || !bounds[0].Equal(bounds[2]) || fmt.Sprint(expected) != "[6 6 6]" {
		t.Fatalf("bounds %v, expected %v: want one bound and a count of 6 in every chunk", bounds, expected)
	}
	if first := testdb.Scalar[time.Time](t, pool, `SELECT min(finished_at) FROM job_queue WHERE id = ANY($1)`, late); !bounds[0].Before(first) {
		t.Fatalf("bound %s is not before the late jobs' finish %s", bounds[0], first)
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_replays WHERE source_job_id = ANY($1)`, late); n != 0 {
		t.Fatalf("%d late jobs replayed", n)
	}

	// The same action, bound given: nothing more.
	pinned := req
	pinned.Filter = &replay.Filter{JobType: "email", SucceededUntil: &bounds[0]}
	if sum, _ := collect(t, ctx, pool, pinned); sum != (replay.BulkSummary{Selected: 6, Existing: 6}) {
		t.Fatalf("rerun with the pinned bound: %+v", sum)
	}
	// A new open action: the late jobs too.
	if sum, _ := collect(t, ctx, pool, req); sum != (replay.BulkSummary{Selected: 9, Existing: 6, Inserted: 3}) {
		t.Fatalf("new open run: %+v", sum)
	}
}

// TestBulkConcurrentOpenFiltersDoNotReplayEachOthersReplays runs two
// open-ended actions over the same type under different keys, the second
// inside the first, and lets every replay made so far succeed after each
// one's first chunk: neither replays the other's replays.
func TestBulkConcurrentOpenFiltersDoNotReplayEachOthersReplays(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), pinMarker{}, true)
	pool := testdb.New(t)
	scope := runledger.Global()
	ids := seedSucceeded(t, pool, scope, "email", 6, time.Now().Add(-time.Hour))
	mine := func(ctx context.Context) bool { return ctx.Value(pinMarker{}) != nil }
	reqA := replay.BulkRequest{Scope: scope, Key: "action-a", Reason: "r", Filter: &replay.Filter{JobType: "email"}, ChunkSize: 2}
	reqB := reqA
	reqB.Key = "action-b"
	var sumB replay.BulkSummary
	var errB error
	defer failpoint.EnableFor(replay.FailpointBulkAfterChunk, func(ctx context.Context, arg any) {
		c := arg.(replay.BulkCall)
		switch {
		case !mine(ctx) || c.Chunk != 0:
		case c.Label == reqA.Key:
			sumB, errB = replay.Bulk(ctx, pool, reqB, nil)
		case c.Label == reqB.Key:
			testdb.Exec(t, pool, `
				UPDATE job_queue SET status = 'SUCCEEDED', stage = 'completed', attempt = 1, finished_at = now()
				WHERE id IN (SELECT replay_job_id FROM job_replays)`)
		}
	}, mine)()
	sumA, errA := replay.Bulk(ctx, pool, reqA, nil)
	if errA != nil || errB != nil {
		t.Fatalf("A: %v; B: %v", errA, errB)
	}
	for name, s := range map[string]replay.BulkSummary{"A": sumA, "B": sumB} {
		if s != (replay.BulkSummary{Selected: 6, Inserted: 6}) {
			t.Errorf("action %s: %+v, want the 6 sources only", name, s)
		}
	}
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_replays WHERE source_job_id IN (SELECT replay_job_id FROM job_replays)`); n != 0 {
		t.Fatalf("%d replays of replays", n)
	}
	assertReplayedOnce(t, pool, reqA.Key, ids)
	assertReplayedOnce(t, pool, reqB.Key, ids)
}

// TestBulkStopEndsTheActionAfterTheChunkInFlight closes Stop while the
// first chunk's transaction is open: that chunk commits and is reported,
// no other begins, and the error matches ErrBulkStopped.
func TestBulkStopEndsTheActionAfterTheChunkInFlight(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), pinMarker{}, true)
	pool := testdb.New(t)
	scope := runledger.Global()
	ids := seedSucceeded(t, pool, scope, "email", 9, time.Now().Add(-time.Hour))
	stop := make(chan struct{})
	mine := func(ctx context.Context) bool { return ctx.Value(pinMarker{}) != nil }
	defer failpoint.EnableFor(replay.FailpointBulkAfterLock, func(ctx context.Context, arg any) {
		if mine(ctx) && arg.(replay.BulkCall).Chunk == 0 {
			close(stop)
		}
	}, mine)()
	var chunks []int
	sum, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: "stop", Reason: "r", Sources: listOf(ids, 1), ChunkSize: 4, Stop: stop},
		func(c replay.BulkChunk) error {
			chunks = append(chunks, c.Index)
			return nil
		})
	if !errors.Is(err, replay.ErrBulkStopped) || sum != (replay.BulkSummary{Selected: 4, Inserted: 4}) || fmt.Sprint(chunks) != "[0]" {
		t.Fatalf("stopped bulk: %+v, chunks %v, %v; want the first chunk only and ErrBulkStopped", sum, chunks, err)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 4 {
		t.Fatalf("%d lineage rows, want the first chunk's 4", n)
	}
}

// TestBulkStreamIsReadAChunkAtATime replays a Stream: it is pulled only a
// chunk ahead, a job twice in different chunks is simply existing the
// second time, and a job twice in one chunk stops the action with
// job.replay_bulk_duplicate_source once the chunks before it committed.
func TestBulkStreamIsReadAChunkAtATime(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	scope := runledger.Global()
	ids := seedSucceeded(t, pool, scope, "email", 6, time.Now().Add(-time.Hour))
	stream := func(list []uuid.UUID, pulled *int) iter.Seq2[replay.Source, error] {
		return func(yield func(replay.Source, error) bool) {
			for _, id := range list {
				*pulled++
				if !yield(replay.Source{JobID: id, ExpectedRunNumber: 1}, nil) {
					return
				}
			}
		}
	}
	pulled := 0
	var ahead []int
	list := append(append([]uuid.UUID{}, ids[:4]...), ids[0], ids[4], ids[5])
	sum, err := replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: "stream", Reason: "r", Stream: stream(list, &pulled), ChunkSize: 2},
		func(c replay.BulkChunk) error {
			ahead = append(ahead, pulled-c.Total.Selected)
			return nil
		})
	if err != nil || sum != (replay.BulkSummary{Selected: 7, Inserted: 6, Existing: 1}) {
		t.Fatalf("stream: %+v, %v", sum, err)
	}
	for i, a := range ahead {
		if a > 1 {
			t.Fatalf("after chunk %d the stream was read %d sources ahead, want at most 1 (the next chunk's first)", i, a)
		}
	}
	pulled = 0
	dup := []uuid.UUID{ids[0], ids[1], ids[2], ids[2]}
	sum, err = replay.Bulk(ctx, pool, replay.BulkRequest{Scope: scope, Key: "dup", Reason: "r", Stream: stream(dup, &pulled), ChunkSize: 2}, nil)
	testdb.WantCode(t, err, "job.replay_bulk_duplicate_source")
	if sum != (replay.BulkSummary{Selected: 2, Inserted: 2}) {
		t.Fatalf("before the duplicate: %+v", sum)
	}
}

// TestBulkOperatorRecordedForASourceReplayedOnItsOwn: a source the chunk
// hands back (it changed under the locking read) is replayed on its own
// under the request's operator too, so every ENQUEUED event of the action
// names who asked for it.
func TestBulkOperatorRecordedForASourceReplayedOnItsOwn(t *testing.T) {
	ctx := context.WithValue(testdb.Context(t), retryMarker{}, true)
	pool := testdb.New(t)
	scope := runledger.Organization(uuid.New())
	ids := seedSucceeded(t, pool, scope, "email", 3, time.Now().Add(-time.Hour))
	mine := func(ctx context.Context) bool { return ctx.Value(retryMarker{}) != nil }

	testdb.Exec(t, pool, `UPDATE job_queue SET status = 'PENDING' WHERE id = $1`, ids[1])
	disable := failpoint.EnableFor(replay.FailpointBulkAfterLock, func(ctx context.Context, _ any) {
		if mine(ctx) {
			testdb.Exec(t, pool, `UPDATE job_queue SET status = 'SUCCEEDED' WHERE id = $1`, ids[1])
		}
	}, mine)
	sum, results := collect(t, ctx, pool, replay.BulkRequest{Scope: scope, Key: "op", Reason: "r", Operator: "alice@example.com", Sources: listOf(ids, 1)})
	disable()
	if sum.Inserted != 3 || results[1].Result != replay.BulkInserted {
		t.Fatalf("%+v %+v", sum, results)
	}
	for _, r := range results {
		op := testdb.Scalar[string](t, pool, `SELECT coalesce(payload->>'operator', '') FROM job_events WHERE job_id = $1 AND event_type = 'ENQUEUED'`, *r.ReplayJobID)
		if op != "alice@example.com" {
			t.Fatalf("replay of %s: ENQUEUED operator %q, want alice@example.com", r.SourceJobID, op)
		}
	}
}
