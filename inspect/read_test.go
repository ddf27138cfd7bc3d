package inspect_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestGetIsScoped(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	orgJob := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(org)})
	globalJob := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})

	if j, err := inspect.Get(ctx, pool, runledger.Organization(org), orgJob.ID); err != nil || j.ID != orgJob.ID {
		t.Fatalf("Get in scope = %v, %v", j.ID, err)
	}
	if j, err := inspect.Get(ctx, pool, runledger.Global(), globalJob.ID); err != nil || j.ID != globalJob.ID {
		t.Fatalf("Get global in scope = %v, %v", j.ID, err)
	}
	for _, c := range []struct {
		scope runledger.Scope
		id    uuid.UUID
	}{
		{runledger.Global(), orgJob.ID},
		{runledger.Organization(uuid.New()), orgJob.ID},
		{runledger.Organization(org), globalJob.ID},
		{runledger.Global(), uuid.New()},
	} {
		_, err := inspect.Get(ctx, pool, c.scope, c.id)
		testdb.WantCode(t, err, runledger.CodeJobNotFound)
	}
}

func TestEventsAreScopedAndInHistoryOrder(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	scope := runledger.Organization(org)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
	if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(l)); err != nil {
		t.Fatal(err)
	}
	evs, err := inspect.Events(ctx, pool, scope, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []runledger.JobEventType{runledger.JobEventEnqueued, runledger.JobEventLeased, runledger.JobEventSucceeded}
	if len(evs) != len(want) {
		t.Fatalf("events = %+v", evs)
	}
	for i, e := range evs {
		if e.EventType != want[i] || e.JobID != l.ID || e.RunNumber != 1 {
			t.Fatalf("event %d = %s on %s run %d, want %s", i, e.EventType, e.JobID, e.RunNumber, want[i])
		}
	}
	if evs[0].Attempt != nil || evs[0].Stage == nil || *evs[0].Stage != runledger.JobStageQueued {
		t.Fatalf("ENQUEUED event attempt %v stage %v", evs[0].Attempt, evs[0].Stage)
	}
	for _, other := range []runledger.Scope{runledger.Global(), runledger.Organization(uuid.New())} {
		_, err := inspect.Events(ctx, pool, other, l.ID)
		testdb.WantCode(t, err, runledger.CodeJobNotFound)
		_, err = inspect.NewestEvents(ctx, pool, other, l.ID, 10)
		testdb.WantCode(t, err, runledger.CodeJobNotFound)
	}
	_, err = inspect.Events(ctx, pool, scope, uuid.New())
	testdb.WantCode(t, err, runledger.CodeJobNotFound)
}

func TestEventsOfJobWithoutHistoryIsEmpty(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	id := uuid.New()
	testdb.Exec(t, pool, `INSERT INTO job_queue (id, job_type, max_attempts) VALUES ($1, 'email', 1)`, id)
	evs, err := inspect.Events(ctx, pool, runledger.Global(), id)
	if err != nil || evs == nil || len(evs) != 0 {
		t.Fatalf("Events of a job without events = %#v, %v; want an empty slice", evs, err)
	}
	newest, err := inspect.NewestEvents(ctx, pool, runledger.Global(), id, 5)
	if err != nil || newest == nil || len(newest) != 0 {
		t.Fatalf("NewestEvents = %#v, %v", newest, err)
	}
}

func TestNewestEventsNewestFirstUpToLimit(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	l := testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})
	if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(l)); err != nil {
		t.Fatal(err)
	}
	evs, err := inspect.NewestEvents(ctx, pool, runledger.Global(), l.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].EventType != runledger.JobEventSucceeded || evs[1].EventType != runledger.JobEventLeased {
		t.Fatalf("newest 2 = %+v, want SUCCEEDED then LEASED", evs)
	}
}

func TestRecentEventsByTypeAcrossScopes(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	a := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	b := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(uuid.New())})
	testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 1})
	evs, err := inspect.RecentEventsByType(ctx, pool, runledger.JobEventEnqueued, time.Now().Add(-time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].JobID != b.ID || evs[1].JobID != a.ID {
		t.Fatalf("ENQUEUED events = %+v, want b then a (newest first, both scopes)", evs)
	}
	evs, err = inspect.RecentEventsByType(ctx, pool, runledger.JobEventEnqueued, time.Now().Add(time.Hour), 10)
	if err != nil || len(evs) != 0 {
		t.Fatalf("events since an hour ahead = %+v, %v", evs, err)
	}
	evs, err = inspect.RecentEventsByType(ctx, pool, runledger.JobEventLeased, time.Now().Add(-time.Hour), 10)
	if err != nil || len(evs) != 1 {
		t.Fatalf("LEASED events = %+v, %v", evs, err)
	}
}

func TestListPagesNewestFirstWithinScope(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	var global, orgJobs []uuid.UUID
	for i := 0; i < 5; i++ {
		global = append(global, testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{}).ID)
		if i < 2 {
			orgJobs = append(orgJobs, testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(org)}).ID)
		}
	}
	var got []uuid.UUID
	var before *inspect.Cursor
	pages := 0
	for {
		p, err := inspect.List(ctx, pool, inspect.ListRequest{Scope: runledger.Global(), Limit: 2, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, testdb.IDs(p.Jobs)...)
		if p.Next == nil {
			break
		}
		before = p.Next
	}
	want := []uuid.UUID{global[4], global[3], global[2], global[1], global[0]}
	if !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("global pages gave %v in %d pages, want %v in 3", got, pages, want)
	}
	p, err := inspect.List(ctx, pool, inspect.ListRequest{Scope: runledger.Organization(org), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(testdb.IDs(p.Jobs), []uuid.UUID{orgJobs[1], orgJobs[0]}) || p.Next != nil {
		t.Fatalf("org page = %v next %v", testdb.IDs(p.Jobs), p.Next)
	}
	p, err = inspect.List(ctx, pool, inspect.ListRequest{Scope: runledger.Organization(org), Limit: 1, Before: &inspect.Cursor{CreatedAt: p.Jobs[0].CreatedAt, ID: p.Jobs[0].ID}})
	if err != nil || !slices.Equal(testdb.IDs(p.Jobs), []uuid.UUID{orgJobs[0]}) {
		t.Fatalf("org page after cursor = %v, %v", testdb.IDs(p.Jobs), err)
	}
}

func TestListByStatus(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	org := uuid.New()
	scope := runledger.Organization(org)
	testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
	done := testdb.Completed(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
	globalDone := testdb.Completed(t, ctx, pool, jobs.EnqueueRequest{})

	p, err := inspect.List(ctx, pool, inspect.ListRequest{Scope: scope, Status: testdb.Ptr(runledger.JobStatusSucceeded), Limit: 10})
	if err != nil || !slices.Equal(testdb.IDs(p.Jobs), []uuid.UUID{done.ID}) || p.Next != nil {
		t.Fatalf("org SUCCEEDED = %v next %v, %v", testdb.IDs(p.Jobs), p.Next, err)
	}
	p, err = inspect.List(ctx, pool, inspect.ListRequest{Scope: runledger.Global(), Status: testdb.Ptr(runledger.JobStatusSucceeded), Limit: 10})
	if err != nil || !slices.Equal(testdb.IDs(p.Jobs), []uuid.UUID{globalDone.ID}) {
		t.Fatalf("global SUCCEEDED = %v, %v", testdb.IDs(p.Jobs), err)
	}
	p, err = inspect.List(ctx, pool, inspect.ListRequest{Scope: runledger.Global(), Status: testdb.Ptr(runledger.JobStatusPending), Limit: 10})
	if err != nil || len(p.Jobs) != 0 {
		t.Fatalf("global PENDING = %v, %v", testdb.IDs(p.Jobs), err)
	}
}

func TestListAllAcrossScopes(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "sms"})
	a := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	b := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(uuid.New()), JobType: "sms"})
	c := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: runledger.Organization(uuid.New())})

	p, err := inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 2})
	if err != nil || !slices.Equal(testdb.IDs(p.Jobs), []uuid.UUID{c.ID, b.ID}) || p.Next == nil {
		t.Fatalf("first page = %v next %v, %v", testdb.IDs(p.Jobs), p.Next, err)
	}
	p, err = inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 2, Before: p.Next})
	if err != nil || !slices.Equal(testdb.IDs(p.Jobs), []uuid.UUID{a.ID}) || p.Next != nil {
		t.Fatalf("second page = %v next %v, %v", testdb.IDs(p.Jobs), p.Next, err)
	}
	p, err = inspect.ListAll(ctx, pool, inspect.ListAllRequest{JobType: "email", Status: testdb.Ptr(runledger.JobStatusPending), Limit: 10})
	if err != nil || !slices.Equal(testdb.IDs(p.Jobs), []uuid.UUID{c.ID, a.ID}) {
		t.Fatalf("email PENDING = %v, %v", testdb.IDs(p.Jobs), err)
	}
}
