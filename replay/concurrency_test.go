package replay_test

import (
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

func TestConcurrentIdenticalRequestsResolveToOneReplay(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	const callers = 32
	pool := testdb.OpenPool(t, testdb.NewURL(t), callers+2, nil) // every caller holds its own connection
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))

	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]replay.Replayed, callers)
	errs := make([]error, callers)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			out, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "same", Reason: "same"})
			errs[i] = err
			if r, ok := out.(replay.Replayed); ok {
				results[i] = r
			}
		}(i)
	}
	close(start)
	wg.Wait()

	inserted := 0
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v (%s)", i, errs[i], testdb.Detail(errs[i]))
		}
		if results[i].Replay.JobID != results[0].Replay.JobID {
			t.Fatalf("caller %d got replay %s, caller 0 got %s", i, results[i].Replay.JobID, results[0].Replay.JobID)
		}
		if results[i].Disposition == runledger.DispositionInserted {
			inserted++
		} else if results[i].Disposition != runledger.DispositionExisting {
			t.Fatalf("caller %d disposition %q", i, results[i].Disposition)
		}
	}
	if inserted != 1 {
		t.Fatalf("%d callers inserted, want exactly 1", inserted)
	}
	if n := testdb.Count(t, pool, "job_replays"); n != 1 {
		t.Fatalf("%d lineage rows", n)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 2 {
		t.Fatalf("%d jobs", n)
	}
}

func TestConcurrentDistinctKeysEachCreateOneReplay(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	const callers = 32
	pool := testdb.OpenPool(t, testdb.NewURL(t), callers+2, nil)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	start := make(chan struct{})
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, callers)
	errs := make([]error, callers)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			out, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1,
				Key: "key-" + uuid.NewString(), Reason: "batch"})
			errs[i] = err
			if r, ok := out.(replay.Replayed); ok && r.Disposition == runledger.DispositionInserted {
				ids[i] = r.Replay.JobID
			}
		}(i)
	}
	close(start)
	wg.Wait()
	seen := map[uuid.UUID]bool{}
	for i, id := range ids {
		if errs[i] != nil || id == uuid.Nil {
			t.Fatalf("caller %d: id %s err %v", i, id, errs[i])
		}
		seen[id] = true
	}
	if len(seen) != callers {
		t.Fatalf("%d distinct replays, want %d", len(seen), callers)
	}
	if n := testdb.Scalar[int64](t, pool, `
		SELECT count(*) FROM job_replays jr
		WHERE (SELECT count(*) FROM job_events e WHERE e.organization_id = jr.organization_id AND e.job_id = jr.replay_job_id AND e.event_type = 'ENQUEUED') = 1
		  AND (SELECT count(*) FROM job_events e WHERE e.organization_id = jr.organization_id AND e.job_id = jr.replay_job_id) = 1`); n != callers {
		t.Fatalf("%d replays with exactly one ENQUEUED event, want %d", n, callers)
	}
}
