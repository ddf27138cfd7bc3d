package replay_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// Benchmarks of both entry points on each path, one client, against the
// test server (fsync off): ns/op is the latency of one replay on
// loopback, and roundtrips/op the round trips it made, counted on the wire
// as in TestRoundTripsPerPath. The caller-transaction benchmarks include
// the caller's BEGIN and COMMIT (pgx's, one round trip each), as a caller
// runs them. For throughput at many clients and the comparison with
// pgbench, see `make bench` (docs/PERFORMANCE.md).
//
//	go test -run '^$' -bench . -benchmem ./replay/

const benchSources = 1000

// benchSetup seeds benchSources succeeded sources of one organization,
// each replayed once under key "seed" and reason "seed", on a
// one-connection pool whose round trips are counted.
func benchSetup(b *testing.B) (*pgxpool.Pool, *testdb.TripCounter, runledger.Scope, []uuid.UUID) {
	b.Helper()
	pool, counter := testdb.CountingPool(b)
	org := uuid.New()
	scope := runledger.Organization(org)
	ctx := context.Background()
	testdb.DefineType(b, pool, "email")
	ids := make([]uuid.UUID, benchSources)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	testdb.Exec(b, pool, `
		INSERT INTO job_queue (id, job_type, organization_id, payload, status, run_number, attempt, max_attempts, stage)
		SELECT id, 'email', $2, '{"to":"a@example.com"}', 'SUCCEEDED', 1, 1, 5, 'completed' FROM unnest($1::uuid[]) id`, ids, org)
	for _, id := range ids {
		if _, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: id, ExpectedRunNumber: 1, Key: "seed", Reason: "seed"}); err != nil {
			b.Fatal(err)
		}
	}
	testdb.Exec(b, pool, `VACUUM ANALYZE`)
	return pool, counter, scope, ids
}

type benchPath struct {
	name  string
	req   func(i int) replay.Request
	check func(replay.Outcome) bool
}

func benchPaths(scope runledger.Scope, ids []uuid.UUID, run string) []benchPath {
	src := func(i int) uuid.UUID { return ids[i%len(ids)] }
	seq := 0 // keys stay unique across the benchmark's repeated calls
	return []benchPath{
		{"inserted", func(i int) replay.Request {
			seq++
			return replay.Request{Scope: scope, SourceJobID: src(i), ExpectedRunNumber: 1, Key: run + "-" + strconv.Itoa(seq), Reason: "bench"}
		}, func(o replay.Outcome) bool {
			r, ok := o.(replay.Replayed)
			return ok && r.Disposition == runledger.DispositionInserted
		}},
		{"existing", func(i int) replay.Request {
			return replay.Request{Scope: scope, SourceJobID: src(i), ExpectedRunNumber: 1, Key: "seed", Reason: "seed"}
		}, func(o replay.Outcome) bool {
			r, ok := o.(replay.Replayed)
			return ok && r.Disposition == runledger.DispositionExisting
		}},
		{"mismatch", func(i int) replay.Request {
			return replay.Request{Scope: scope, SourceJobID: src(i), ExpectedRunNumber: 2, Key: "k", Reason: "bench"}
		}, func(o replay.Outcome) bool { _, ok := o.(replay.ExpectationMismatch); return ok }},
		{"not_found", func(i int) replay.Request {
			return replay.Request{Scope: scope, SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "bench"}
		}, func(o replay.Outcome) bool { _, ok := o.(replay.NotFound); return ok }},
	}
}

func BenchmarkSucceededJob(b *testing.B) {
	pool, counter, scope, ids := benchSetup(b)
	ctx := context.Background()
	for _, p := range benchPaths(scope, ids, "owned-"+uuid.NewString()) {
		b.Run(p.name, func(b *testing.B) {
			before := counter.Count()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out, err := replay.SucceededJob(ctx, pool, p.req(i))
				if err != nil || !p.check(out) {
					b.Fatalf("%s: %T %v", p.name, out, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(counter.Count()-before)/float64(b.N), "roundtrips/op")
		})
	}
}

func BenchmarkSucceededJobTx(b *testing.B) {
	pool, counter, scope, ids := benchSetup(b)
	ctx := context.Background()
	for _, p := range benchPaths(scope, ids, "tx-"+uuid.NewString()) {
		b.Run(p.name, func(b *testing.B) {
			before := counter.Count()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
				if err != nil {
					b.Fatal(err)
				}
				out, err := replay.SucceededJobTx(ctx, tx, p.req(i))
				if err != nil || !p.check(out) {
					_ = tx.Rollback(ctx)
					b.Fatalf("%s: %T %v", p.name, out, err)
				}
				if err := tx.Commit(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(counter.Count()-before)/float64(b.N), "roundtrips/op")
		})
	}
}
