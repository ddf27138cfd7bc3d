package lease_test

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestClaimOrderIsPriorityThenDueTimeThenAge(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	now := time.Now()
	low := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](1), RunAt: testdb.Ptr(now.Add(-time.Hour))})
	laterDue := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](10), RunAt: testdb.Ptr(now.Add(-time.Minute))})
	older := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](10), RunAt: testdb.Ptr(now.Add(-2 * time.Minute))})
	younger := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](10), RunAt: testdb.Ptr(now.Add(-2 * time.Minute))})

	first := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 1})
	if len(first) != 1 || first[0].ID != older.ID {
		t.Fatalf("first claim = %v, want the older of the earliest-due high-priority jobs %s", testdb.IDs(first), older.ID)
	}
	rest := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10})
	want := []uuid.UUID{younger.ID, laterDue.ID, low.ID}
	if !slices.Equal(testdb.IDs(rest), want) {
		t.Fatalf("rest claimed in order %v, want %v", testdb.IDs(rest), want)
	}
}

func TestClaimSkipsRowsLockedByAnotherTransaction(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	held := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](50)})
	free := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](1)})

	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	testdb.LockJob(t, holder, held.ID, "UPDATE")
	if !testdb.RowLocked(t, pool, "job_queue", "id = $1", held.ID, "UPDATE") {
		t.Fatal("precondition: the holder's row lock is not visible to another connection")
	}

	// Were the claim to wait for the held row, it would block until the
	// test's deadline; SKIP LOCKED returns at once without it.
	got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10})
	if !slices.Equal(testdb.IDs(got), []uuid.UUID{free.ID}) {
		t.Fatalf("claimed %v while %s was locked, want only %s", testdb.IDs(got), held.ID, free.ID)
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	claimOnly(t, ctx, pool, held.ID)
}

func TestClaimLeavesJobsNotYetDue(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	future := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{RunAt: testdb.Ptr(time.Now().Add(time.Hour))})
	if future.Stage != runledger.JobStageScheduled {
		t.Fatalf("future job stage = %s, want scheduled", future.Stage)
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v, want nothing (the only job is due in an hour)", testdb.IDs(got))
	}
	testdb.Exec(t, pool, `UPDATE job_queue SET next_run_at = now() - interval '1 second' WHERE id = $1`, future.ID)
	claimOnly(t, ctx, pool, future.ID)
}

func TestClaimFiltersByJobTypes(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "sms"})
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "push"})
	email := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "email"})
	sms := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "sms"})
	push := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "push"})

	got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{JobTypes: []string{"sms", "push"}})
	gotIDs := testdb.IDs(got)
	sort.Slice(gotIDs, func(i, j int) bool { return gotIDs[i].String() < gotIDs[j].String() })
	want := []uuid.UUID{sms.ID, push.ID}
	sort.Slice(want, func(i, j int) bool { return want[i].String() < want[j].String() })
	if !slices.Equal(gotIDs, want) {
		t.Fatalf("claimed %v for types sms and push, want %v", gotIDs, want)
	}
	// No types means every type.
	claimOnly(t, ctx, pool, email.ID)
}

func TestClaimLimitsBatch(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	for i := 0; i < 5; i++ {
		testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 2}); len(got) != 2 {
		t.Fatalf("claimed %d jobs with limit 2", len(got))
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10}); len(got) != 3 {
		t.Fatalf("claimed %d jobs after the first batch, want the 3 left", len(got))
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10}); got == nil || len(got) != 0 {
		t.Fatalf("claim of an empty queue = %#v, want an empty non-nil slice", got)
	}
}

func TestClaimLeasesJobAndWritesLeasedEvent(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	before := time.Now()
	got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{WorkerID: "w-7", Lease: 45 * time.Second})
	if len(got) != 1 {
		t.Fatalf("claimed %d jobs", len(got))
	}
	l := got[0]
	switch {
	case l.ID != j.ID, l.Status != runledger.JobStatusLeased, l.Stage != runledger.JobStageRunning:
		t.Fatalf("leased job = %s %s %s, want %s LEASED running", l.ID, l.Status, l.Stage, j.ID)
	case l.Attempt != 1 || l.RunNumber != 1:
		t.Fatalf("attempt/run = %d/%d, want 1/1", l.Attempt, l.RunNumber)
	case l.WorkerID == nil || *l.WorkerID != "w-7":
		t.Fatalf("worker = %v, want w-7", l.WorkerID)
	case l.LeaseExpiresAt == nil || l.StartedAt == nil:
		t.Fatal("lease_expires_at or started_at not set")
	}
	// Both are the claim transaction's now().
	if d := l.LeaseExpiresAt.Sub(*l.StartedAt); d != 45*time.Second {
		t.Fatalf("lease_expires_at - started_at = %s, want 45s", d)
	}
	if !approx(l.LeaseExpiresAt.Sub(before), 45*time.Second, 5*time.Second) {
		t.Fatalf("lease expires %s after the claim began, want about 45s", l.LeaseExpiresAt.Sub(before))
	}
	typ, attempt, payload, _ := lastEvent(t, ctx, pool, j.ID)
	if typ != "LEASED" || attempt == nil || *attempt != 1 || payload["worker_id"] != "w-7" {
		t.Fatalf("last event = %s attempt %v payload %v, want LEASED attempt 1 by w-7", typ, attempt, payload)
	}
	if ev := testdb.EventTypes(t, pool, j.ID); !slices.Equal(ev, []string{"ENQUEUED", "LEASED"}) {
		t.Fatalf("events = %v", ev)
	}

	// A second claim and a retry after a failure count the attempt up.
	if _, err := lease.Fail(ctx, pool, lease.FailRequest{JobID: l.ID, RunNumber: 1, Attempt: 1, WorkerID: "w-7", RetryDelay: testdb.Ptr(time.Duration(0))}); err != nil {
		t.Fatal(err)
	}
	again := claimOnly(t, ctx, pool, j.ID)
	if again.Attempt != 2 {
		t.Fatalf("attempt after one failure = %d, want 2", again.Attempt)
	}
}

func TestClaimHoldsOneLeasePerExecutionResource(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	first := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "printer-1"})
	second := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "printer-1"})
	unrelated := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Priority: testdb.Ptr[int32](1)})

	// Both keyed jobs are candidates of one batch; only the first in claim
	// order takes the key.
	got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10})
	if !slices.Equal(testdb.IDs(got), []uuid.UUID{first.ID, unrelated.ID}) {
		t.Fatalf("first claim = %v, want %s (holds printer-1) and the unkeyed %s", testdb.IDs(got), first.ID, unrelated.ID)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_execution_resource_claims WHERE resource_key = 'printer-1' AND job_id = $1 AND attempt = 1`, first.ID); n != 1 {
		t.Fatalf("claim rows for the first job = %d, want 1", n)
	}
	// While the first is leased, the second is not claimable.
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
		t.Fatalf("claimed %v while printer-1 was held", testdb.IDs(got))
	}
	if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(got[0])); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_execution_resource_claims`); n != 0 {
		t.Fatalf("claim rows after completion = %d, want 0", n)
	}
	claimOnly(t, ctx, pool, second.ID)
}

// An execution resource key is exclusive within a tenant: two tenants'
// jobs naming the same key run side by side, two of one tenant do not.
func TestExecutionResourceKeysAreExclusivePerTenant(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	a, b := runledger.Organization(uuid.New()), runledger.Organization(uuid.New())
	aFirst := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: a, ExecutionResourceKey: "printer-1"})
	testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: a, ExecutionResourceKey: "printer-1"})
	bOnly := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: b, ExecutionResourceKey: "printer-1"})
	global := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "printer-1"})

	got := testdb.IDs(testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10}))
	slices.SortFunc(got, func(x, y uuid.UUID) int { return strings.Compare(x.String(), y.String()) })
	want := []uuid.UUID{aFirst.ID, bOnly.ID, global.ID}
	slices.SortFunc(want, func(x, y uuid.UUID) int { return strings.Compare(x.String(), y.String()) })
	if !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want one printer-1 job per tenant %v", got, want)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(DISTINCT organization_id) FROM job_execution_resource_claims WHERE resource_key = 'printer-1'`); n != 3 {
		t.Fatalf("printer-1 held in %d tenants, want 3", n)
	}
}

func TestConcurrentClaimsNeverLeaseAJobTwice(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	const total = 60
	for i := 0; i < total; i++ {
		testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	}
	var (
		mu     sync.Mutex
		seen   = map[uuid.UUID]int{}
		wg     sync.WaitGroup
		errsCh = make(chan error, 8)
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			for {
				got, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 3, Lease: time.Minute})
				if err != nil {
					errsCh <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, j := range got {
					seen[j.ID]++
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errsCh)
	for err := range errsCh {
		t.Fatalf("concurrent claim: %v", err)
	}
	if len(seen) != total {
		t.Fatalf("leased %d distinct jobs, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %s leased %d times", id, n)
		}
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_events WHERE event_type = 'LEASED'`); n != total {
		t.Fatalf("LEASED events = %d, want %d", n, total)
	}
}

func TestClaimWaitsForUncommittedResourceClaimThenLeavesKeyToIt(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	first := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "k"})
	second := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "k"})

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	mine, err := lease.ClaimTx(ctx, tx, lease.ClaimRequest{WorkerID: "w1", Limit: 1, Lease: time.Minute})
	if err != nil || len(mine) != 1 || mine[0].ID != first.ID {
		t.Fatalf("ClaimTx = %v, %v; want %s", testdb.IDs(mine), err, first.ID)
	}

	type result struct {
		got []runledger.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w2", Limit: 10, Lease: time.Minute})
		done <- result{got, err}
	}()
	// The second claimer passes the locked first job by, finds the second
	// job's key unclaimed in its snapshot, and must wait on the first
	// claimer's uncommitted claim row rather than take the key too.
	testdb.WaitBlocked(t, pool, 0)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.got) != 0 {
		t.Fatalf("second claimer leased %v while %s held key k", testdb.IDs(r.got), first.ID)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT count(*) FROM job_queue WHERE status = 'LEASED'`); n != 1 {
		t.Fatalf("%d leased jobs share key k", n)
	}
	if j, err := inspect.Get(ctx, pool, runledger.Global(), second.ID); err != nil || j.Status != runledger.JobStatusPending || j.Attempt != 0 {
		t.Fatalf("second job = %s attempt %d, %v; want untouched PENDING", j.Status, j.Attempt, err)
	}
}

func TestClaimTxLeasesNothingWhenCallerRollsBack(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	j := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{ExecutionResourceKey: "k"})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := lease.ClaimTx(ctx, tx, lease.ClaimRequest{WorkerID: "w", Limit: 1, Lease: time.Minute}); err != nil || len(got) != 1 {
		t.Fatalf("ClaimTx = %v, %v", testdb.IDs(got), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Scalar[int](t, pool, `SELECT (SELECT count(*) FROM job_execution_resource_claims) + (SELECT count(*) FROM job_events WHERE event_type = 'LEASED')`); n != 0 {
		t.Fatalf("%d claim rows or LEASED events after rollback", n)
	}
	claimOnly(t, ctx, pool, j.ID)
}
