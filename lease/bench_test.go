package lease_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// Benchmarks of the worker's two statements, one client, against the test
// kit's server (fsync off): on one PostgreSQL server, or with
// RUNLEDGER_TEST_CITUS=1 on a coordinator and two workers, where the
// figures of docs/SCALING.md come from:
//
//	make bench-citus

// benchJobs is how many due jobs a benchmark seeds per run of its loop.
const benchJobs = 20000

// seedDue inserts n due jobs of type "email", spread round robin over the
// given tenants, and analyzes the table.
func seedDue(b *testing.B, ctx context.Context, pool jobs.Querier, tenants []uuid.UUID, n int) {
	b.Helper()
	testdb.Exec(b, pool, `INSERT INTO job_queue (id, job_type, organization_id, payload, max_attempts)
		SELECT gen_random_uuid(), 'email', ($1::uuid[])[1 + i % cardinality($1::uuid[])], '{}', 3
		FROM generate_series(0, $2 - 1) i`, tenants, n)
	testdb.Exec(b, pool, `ANALYZE job_queue`)
}

// BenchmarkClaimComplete claims one job and completes it, in one tenant:
// ns/op is the pair's latency (two round trips).
func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	pool := testdb.New(b)
	testdb.Define(b, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	org := uuid.New()
	scope := runledger.Organization(org)
	seeded := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i == seeded {
			b.StopTimer()
			seedDue(b, ctx, pool, []uuid.UUID{org}, benchJobs)
			seeded += benchJobs
			b.StartTimer()
		}
		got, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "bench", Limit: 1, Lease: time.Minute})
		if err != nil || len(got) != 1 {
			b.Fatalf("claim: %d jobs, %v", len(got), err)
		}
		j := got[0]
		if _, err := lease.Complete(ctx, pool, lease.CompleteRequest{Scope: &scope, JobID: j.ID, RunNumber: j.RunNumber, Attempt: j.Attempt, WorkerID: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimAcrossTenants claims up to 10 jobs when every one of 10,
// 100 or 1,000 tenants has due work: on one server one statement, on
// Citus the tenants with due work are read first and claimed tenant by
// tenant. The claimed jobs are released by rolling back, so every
// iteration sees the same queue.
func BenchmarkClaimAcrossTenants(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run("tenants="+strconv.Itoa(n), func(b *testing.B) {
			ctx := context.Background()
			pool := testdb.New(b)
			testdb.Define(b, ctx, pool, jobs.DefinitionInput{JobType: "email"})
			tenants := make([]uuid.UUID, n)
			for i := range tenants {
				tenants[i] = uuid.New()
			}
			seedDue(b, ctx, pool, tenants, 10*n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got, err := lease.ClaimTx(ctx, tx, lease.ClaimRequest{WorkerID: "bench", Limit: 10, Lease: time.Minute})
				if err != nil || len(got) != 10 {
					b.Fatalf("claim: %d jobs, %v", len(got), err)
				}
				if err := tx.Rollback(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
