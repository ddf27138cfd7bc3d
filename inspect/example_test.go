package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// tenant is the organization the examples' jobs belong to.
var tenant = runledger.Organization(uuid.MustParse("0190e0a4-7a1c-7000-8000-00000000a11c"))

// examplePool returns a pool on a fresh migrated database of the test
// kit holding three email jobs of tenant, the first of them completed,
// and the id of that first job; in an application it is the pool of your
// database.
func examplePool(ctx context.Context) (*pgxpool.Pool, uuid.UUID) {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "email"}); err != nil {
		log.Fatal(err)
	}
	var first uuid.UUID
	for i := range 3 {
		enq, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: tenant, JobType: "email", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i+1))})
		if err != nil {
			log.Fatal(err)
		}
		if i == 0 {
			first = enq.Job.ID
		}
	}
	leased, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "worker-a", Limit: 1, Lease: time.Minute})
	if err != nil || len(leased) != 1 {
		log.Fatal("claim: ", err)
	}
	j := leased[0]
	if _, err := lease.Complete(ctx, pool, lease.CompleteRequest{JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "worker-a"}); err != nil {
		log.Fatal(err)
	}
	return pool, first
}

// ExampleGet reads a job in the caller's scope; in another scope the same
// id is not found, exactly as an id no job has.
func ExampleGet() {
	ctx := context.Background()
	pool, id := examplePool(ctx)
	defer pool.Close()

	j, err := inspect.Get(ctx, pool, tenant, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.JobType, j.Status, string(j.Payload))

	_, err = inspect.Get(ctx, pool, runledger.Global(), id)
	fmt.Println(runledger.CodeOf(err))
	// Output:
	// email SUCCEEDED {"n": 1}
	// job.not_found
}

// ExampleEvents reads a job's whole history, in the order it happened.
func ExampleEvents() {
	ctx := context.Background()
	pool, id := examplePool(ctx)
	defer pool.Close()

	events, err := inspect.Events(ctx, pool, tenant, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range events {
		fmt.Println(e.EventType)
	}
	// Output:
	// ENQUEUED
	// LEASED
	// SUCCEEDED
}

// ExampleList pages through a tenant's jobs, newest first: each page's
// Next is the cursor of the page after it, nil on the last page.
func ExampleList() {
	ctx := context.Background()
	pool, _ := examplePool(ctx)
	defer pool.Close()

	req := inspect.ListRequest{Scope: tenant, Limit: 2}
	for {
		page, err := inspect.List(ctx, pool, req)
		if err != nil {
			log.Fatal(err)
		}
		for _, j := range page.Jobs {
			fmt.Println(string(j.Payload), j.Status)
		}
		if page.Next == nil {
			break
		}
		fmt.Println("-- next page")
		req.Before = page.Next
	}
	// Output:
	// {"n": 3} PENDING
	// {"n": 2} PENDING
	// -- next page
	// {"n": 1} SUCCEEDED
}

// ExampleSearch filters jobs by status and type, across every tenant when
// the scope is nil (an operator's read).
func ExampleSearch() {
	ctx := context.Background()
	pool, _ := examplePool(ctx)
	defer pool.Close()

	pending := runledger.JobStatusPending
	page, err := inspect.Search(ctx, pool, inspect.SearchRequest{Status: &pending, JobType: "email", Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(page.Jobs), "pending email jobs")
	// Output:
	// 2 pending email jobs
}

// ExampleGetDetail reads a job with a page of its events, its replay
// lineage and its requeue history in one snapshot.
func ExampleGetDetail() {
	ctx := context.Background()
	pool, id := examplePool(ctx)
	defer pool.Close()

	d, err := inspect.GetDetail(ctx, pool, inspect.DetailRequest{Scope: tenant, JobID: id, EventLimit: 2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Job.Status, "replays:", len(d.Replays), "replayed from:", d.ReplayedFrom, "requeues:", len(d.Requeues))
	for _, e := range d.Events {
		fmt.Println(e.EventType)
	}
	fmt.Println("older events:", d.MoreEvents)
	// Output:
	// SUCCEEDED replays: 0 replayed from: <nil> requeues: 0
	// LEASED
	// SUCCEEDED
	// older events: true
}

// ExampleLocate finds the tenant of a job known only by its id, for an
// operator who then reads it in that scope.
func ExampleLocate() {
	ctx := context.Background()
	pool, id := examplePool(ctx)
	defer pool.Close()

	scope, err := inspect.Locate(ctx, pool, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(scope == tenant)
	// Output:
	// true
}
