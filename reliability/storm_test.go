package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

// The storm tests are not parallel: each opens up to 64 connections, and
// sequential tests finish before the parallel ones start.

const stormSize = 64

// TestStormOneKeyTwoReasons sends 64 concurrent replays of one source with
// one request key, half with one reason and half with another. Exactly one
// lineage row results; every caller whose reason is the winner's gets the
// winner's replay (one of them Inserted, the rest Existing), and every
// other caller gets the idempotency conflict.
func TestStormOneKeyTwoReasons(t *testing.T) {
	if testing.Short() {
		t.Skip("storm test: skipped under -short")
	}
	ctx := testdb.Context(t)
	e := newEnv(t)
	sourceID := testdb.Seed(t, e.admin, testdb.Succeeded(runledger.Global()))
	before := takeSnapshot(t, e.admin)
	pool := openPool(t, e.url, "rl-storm", stormSize, nil)
	warmPool(t, ctx, pool, stormSize)

	reasons := [2]string{"reason one", "reason two"}
	type result struct {
		reason string
		out    replay.Outcome
		err    error
	}
	results := make([]result, stormSize)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			reason := reasons[i%2]
			<-start
			out, err := replay.SucceededJob(ctx, pool, req(sourceID, "storm-key", reason))
			results[i] = result{reason, out, err}
		}(i)
	}
	close(start)
	wg.Wait()

	var winnerID uuid.UUID
	var winnerReason string
	if err := e.admin.QueryRow(ctx, `SELECT replay_job_id, reason FROM job_replays WHERE source_job_id = $1`, sourceID).
		Scan(&winnerID, &winnerReason); err != nil {
		t.Fatalf("want exactly one lineage row: %v", err)
	}
	counts := map[string]int{}
	for i, r := range results {
		if r.reason == winnerReason {
			got, ok := r.out.(replay.Replayed)
			if r.err != nil || !ok || got.Replay.JobID != winnerID {
				t.Fatalf("caller %d (winner's reason): %+v, %v (%s); want the winner's replay %s", i, r.out, r.err, testdb.Detail(r.err), winnerID)
			}
			counts[string(got.Disposition)]++
			continue
		}
		if r.out != nil || !errors.Is(r.err, runledger.CodeReplayIdempotencyConflict) {
			t.Fatalf("caller %d (other reason): %+v, %v (%s); want the idempotency conflict", i, r.out, r.err, testdb.Detail(r.err))
		}
		counts["conflict"]++
	}
	if counts["inserted"] != 1 || counts["existing"] != stormSize/2-1 || counts["conflict"] != stormSize/2 {
		t.Fatalf("outcomes %v, want 1 inserted, %d existing, %d conflicts", counts, stormSize/2-1, stormSize/2)
	}
	checkOneReplay(t, e.admin, sourceID, "storm-key", winnerReason, 1)
	checkSourceUnchanged(t, e.admin, before, sourceID)
	t.Logf("winner %q: %s", winnerReason, formatCounts(counts))
}

// warmPool opens n connections of pool and returns them to it, so a storm
// starts with live connections rather than queueing on connects.
func warmPool(t *testing.T, ctx context.Context, pool *pgxpool.Pool, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// TestStormReplaysRacingWorkers replays 64 sources concurrently (each
// twice: Inserted, then Existing while workers may hold it) while four
// workers claim and complete the replays as they appear. Half of the
// sources share eight execution resource keys, which the replays copy, so
// claims also take and release resource claims. Nothing may fail (in
// particular no deadlock, 40P01), every replay ends SUCCEEDED with exactly
// the events ENQUEUED, LEASED, SUCCEEDED, and the sources are unchanged.
func TestStormReplaysRacingWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("storm test: skipped under -short")
	}
	ctx := testdb.Context(t)
	e := newEnv(t)
	sources := make([]uuid.UUID, stormSize)
	for i := range sources {
		s := testdb.Succeeded(runledger.Global())
		if i%2 == 0 {
			k := fmt.Sprintf("resource-%d", i%16)
			s.ResourceKey = &k
		}
		sources[i] = testdb.Seed(t, e.admin, s)
	}
	before := takeSnapshot(t, e.admin)
	pool := openPool(t, e.url, "rl-storm", stormSize, nil)
	warmPool(t, ctx, pool, stormSize)

	var (
		mu       sync.Mutex
		failures []error
		replays  = map[uuid.UUID]uuid.UUID{} // source -> replay
	)
	fail := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Errorf("%s: %w (%s)", what, err, testdb.Detail(err)))
	}
	const workers = 4
	var completed atomic.Int64
	ready := make(chan struct{}, stormSize)
	start := make(chan struct{})
	var wg sync.WaitGroup

	for i, src := range sources {
		wg.Add(1)
		go func(i int, src uuid.UUID) {
			defer wg.Done()
			<-start
			r := req(src, "storm-key", "storm reason")
			out, err := replay.SucceededJob(ctx, pool, r)
			if err != nil {
				fail(fmt.Sprintf("replay %d", i), err)
				return
			}
			first, ok := out.(replay.Replayed)
			if !ok || first.Disposition != runledger.DispositionInserted {
				fail(fmt.Sprintf("replay %d", i), fmt.Errorf("outcome %+v, want Inserted", out))
				return
			}
			mu.Lock()
			replays[src] = first.Replay.JobID
			mu.Unlock()
			ready <- struct{}{}
			// Again, while workers claim and complete: Existing, with the
			// replay's state of the moment, locked for the transaction.
			out, err = replay.SucceededJob(ctx, pool, r)
			if err != nil {
				fail(fmt.Sprintf("repeat replay %d", i), err)
				return
			}
			again, ok := out.(replay.Replayed)
			if !ok || again.Disposition != runledger.DispositionExisting || again.Replay.JobID != first.Replay.JobID {
				fail(fmt.Sprintf("repeat replay %d", i), fmt.Errorf("outcome %+v, want Existing %s", out, first.Replay.JobID))
			}
		}(i, src)
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			worker := fmt.Sprintf("worker-%d", w)
			for completed.Load() < stormSize && ctx.Err() == nil {
				got, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: worker, Limit: 4, Lease: time.Minute})
				if err != nil {
					fail(worker+" claim", err)
					return
				}
				for _, j := range got {
					if _, err := lease.Complete(ctx, pool, lease.CompleteRequest{JobID: j.ID, RunNumber: j.RunNumber,
						Attempt: j.Attempt, WorkerID: worker, Output: []byte(`{"ok":true}`)}); err != nil {
						fail(worker+" complete", err)
						return
					}
					completed.Add(1)
				}
				if len(got) == 0 {
					// Nothing claimable now: wait for a new replay, or poll
					// again shortly (a claimable job may be locked by a
					// repeat replay, or its resource held).
					select {
					case <-ready:
					case <-time.After(5 * time.Millisecond):
					case <-ctx.Done():
					}
				}
			}
		}(w)
	}
	close(start)
	wg.Wait()

	for _, err := range failures {
		var e *runledger.Error
		if errors.As(err, &e) && e.SQLState == "40P01" {
			t.Errorf("DEADLOCK: %v", err)
			continue
		}
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if n := completed.Load(); n != stormSize {
		t.Fatalf("%d replays completed, want %d", n, stormSize)
	}
	for src, id := range replays {
		if st := testdb.Scalar[string](t, e.admin, `SELECT status::text FROM job_queue WHERE id = $1`, id); st != "SUCCEEDED" {
			t.Errorf("replay %s of %s is %s", id, src, st)
		}
		if got := testdb.EventTypes(t, e.admin, id); fmt.Sprint(got) != "[ENQUEUED LEASED SUCCEEDED]" {
			t.Errorf("replay %s events %v, want [ENQUEUED LEASED SUCCEEDED]", id, got)
		}
	}
	if n := testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM job_replays`); n != stormSize {
		t.Fatalf("%d lineage rows, want %d", n, stormSize)
	}
	if n := testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM job_execution_resource_claims WHERE release_after IS NULL`); n != 0 {
		t.Errorf("%d resource claims still held after every replay completed", n)
	}
	for _, src := range sources {
		checkSourceUnchanged(t, e.admin, before, src)
	}
	if n := testdb.Scalar[int64](t, e.admin, `SELECT count(*) FROM job_events WHERE job_id = ANY($1)`, sources); n != 0 {
		t.Errorf("%d events written on sources", n)
	}
}
