package health_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

const day = 24 * time.Hour

// old and recent are finished jobs before and after a cutoff of a day ago.
func old(org uuid.UUID, status string) job {
	return job{org: org, status: status, finished: 2 * day, ran: time.Second, events: 5}
}
func recent(org uuid.UUID, status string) job {
	return job{org: org, status: status, finished: time.Hour, ran: time.Second, events: 5}
}

// Every lineage shape: a family is pruned whole or kept whole, and nothing
// newer than the cutoff, of another status, live, owned by a workflow or
// of another tenant is deleted. Batches of two make families span batches.
func TestPruneLineageShapes(t *testing.T) {
	t.Parallel()
	for _, dry := range []bool{true, false} {
		t.Run(map[bool]string{true: "dry run", false: "prune"}[dry], func(t *testing.T) {
			t.Parallel()
			ctx := testdb.Context(t)
			pool := testdb.New(t)
			var gone, kept []uuid.UUID
			add := func(ids *[]uuid.UUID, j job) uuid.UUID {
				id := insert(t, pool, j)
				*ids = append(*ids, id)
				return id
			}
			// A lone old job, and each finished status.
			add(&gone, old(orgA, "SUCCEEDED"))
			add(&gone, old(orgA, "DEAD_LETTERED"))
			add(&gone, old(orgA, "CANCELED"))
			// A source with two replays, all old.
			s := add(&gone, old(orgA, "SUCCEEDED"))
			link(t, pool, s, add(&gone, old(orgA, "SUCCEEDED")))
			link(t, pool, s, add(&gone, old(orgA, "CANCELED")))
			// A chain of replays, all old.
			a := add(&gone, old(orgA, "SUCCEEDED"))
			b := add(&gone, old(orgA, "SUCCEEDED"))
			c := add(&gone, old(orgA, "SUCCEEDED"))
			link(t, pool, a, b)
			link(t, pool, b, c)
			// A chain whose last replay is still pending: kept whole (2
			// old jobs kept for lineage).
			a = add(&kept, old(orgA, "SUCCEEDED"))
			b = add(&kept, old(orgA, "SUCCEEDED"))
			link(t, pool, a, b)
			link(t, pool, b, add(&kept, job{org: orgA, status: "PENDING"}))
			// A replay whose source finished after the cutoff (1 kept).
			s = add(&kept, recent(orgA, "SUCCEEDED"))
			link(t, pool, s, add(&kept, old(orgA, "SUCCEEDED")))
			// A family straddling the cutoff: old source, a recent replay of
			// an old replay (2 kept).
			s = add(&kept, old(orgA, "SUCCEEDED"))
			r := add(&kept, old(orgA, "SUCCEEDED"))
			link(t, pool, s, r)
			link(t, pool, r, add(&kept, recent(orgA, "SUCCEEDED")))
			// A job a workflow step owns (1 kept for the workflow), and the
			// old source it was replayed from (1 kept for lineage).
			s = add(&kept, old(orgA, "SUCCEEDED"))
			w := add(&kept, old(orgA, "SUCCEEDED"))
			link(t, pool, s, w)
			testdb.OwnByWorkflowStep(t, pool, w)
			// Recent and live jobs, and another tenant's old jobs.
			add(&kept, recent(orgA, "SUCCEEDED"))
			add(&kept, job{org: orgA, status: "LEASED", lease: time.Minute})
			add(&kept, old(orgB, "SUCCEEDED"))
			add(&kept, old(uuid.Nil, "SUCCEEDED"))

			events := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events`)
			var progress []health.PruneResult
			res, err := health.Prune(ctx, pool, health.PruneRequest{
				Scope: testdb.Ptr(runledger.Organization(orgA)), FinishedBefore: time.Now().Add(-day),
				BatchSize: 2, DryRun: dry, Progress: func(r health.PruneResult) { progress = append(progress, r) },
			})
			if err != nil {
				t.Fatal(err)
			}
			want := health.PruneResult{DryRun: dry, DeletedJobs: int64(len(gone)), DeletedEvents: 5 * int64(len(gone)),
				KeptForLineage: 2 + 1 + 2 + 1, KeptForWorkflow: 1, Batches: res.Batches, Cutoff: res.Cutoff}
			if res != want {
				t.Fatalf("result %+v, want %+v", res, want)
			}
			if len(progress) != res.Batches || progress[len(progress)-1] != res || res.Batches < 5 {
				t.Fatalf("%d progress reports over %d batches: %+v", len(progress), res.Batches, progress)
			}
			for _, id := range kept {
				if !exists(t, pool, id) {
					t.Errorf("job %s was deleted", id)
				}
			}
			for _, id := range gone {
				if exists(t, pool, id) == !dry {
					t.Errorf("job %s: exists %v after a prune (dry run %v)", id, !dry, dry)
				}
			}
			left := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events`)
			if dry && left != events || !dry && left != events-res.DeletedEvents {
				t.Fatalf("%d events left of %d", left, events)
			}
			noOrphanEvents(t, pool)
			// The workflow still owns its job; every lineage row's jobs exist.
			if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM workflow_steps WHERE job_id = $1`, w); n != 1 {
				t.Fatal("the workflow step lost its job")
			}
			// Rerunning finds only what was kept.
			if !dry {
				res, err = health.Prune(ctx, pool, health.PruneRequest{
					Scope: testdb.Ptr(runledger.Organization(orgA)), FinishedBefore: time.Now().Add(-day)})
				if err != nil || res.DeletedJobs != 0 || res.KeptForLineage != 6 || res.KeptForWorkflow != 1 {
					t.Fatalf("rerun: %+v %v", res, err)
				}
			}
		})
	}
}

// A family is deleted whatever order its rows go in: the lineage rows go
// with the family in the deleting statement, so the check that a deleted
// replay is no longer referenced never sees a lineage row whose source's
// cascade has not run yet. Here each replay is stored before its source
// (a lower id and an earlier heap position, as ids made on a clock behind
// the source's are), for single pairs and for chains, in batches of one
// and of many.
func TestPruneFamilyWhateverTheDeleteOrder(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, health.DefaultPruneBatch} {
		ctx := testdb.Context(t)
		pool := testdb.New(t)
		var ids []uuid.UUID
		for range 20 {
			r2 := insert(t, pool, old(orgA, "SUCCEEDED"))
			r := insert(t, pool, old(orgA, "SUCCEEDED"))
			s := insert(t, pool, old(orgA, "SUCCEEDED"))
			link(t, pool, s, r)
			link(t, pool, r, r2)
			ids = append(ids, r2, r, s)
		}
		res, err := health.Prune(ctx, pool, health.PruneRequest{
			Scope: testdb.Ptr(runledger.Organization(orgA)), FinishedBefore: time.Now().Add(-day), BatchSize: batch})
		if err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		if res.DeletedJobs != int64(len(ids)) || res.DeletedEvents != 5*int64(len(ids)) || res.KeptForLineage != 0 {
			t.Fatalf("batch %d: %+v", batch, res)
		}
		if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_replays`); n != 0 {
			t.Fatalf("batch %d: %d lineage rows left", batch, n)
		}
	}
}

// A prune of some statuses keeps the families that hold another status;
// without a scope it prunes every tenant.
func TestPruneStatusesAndEveryTenant(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	s := insert(t, pool, old(orgA, "SUCCEEDED"))
	r := insert(t, pool, old(orgA, "DEAD_LETTERED"))
	link(t, pool, s, r)
	dead := insert(t, pool, old(orgB, "DEAD_LETTERED"))
	var succeeded []uuid.UUID
	for _, org := range []uuid.UUID{orgA, orgB, uuid.Nil} {
		succeeded = append(succeeded, insert(t, pool, old(org, "SUCCEEDED")))
	}
	res, err := health.Prune(ctx, pool, health.PruneRequest{FinishedBefore: time.Now().Add(-day),
		Statuses: []runledger.JobStatus{runledger.JobStatusSucceeded, runledger.JobStatusSucceeded}})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedJobs != 3 || res.DeletedEvents != 15 || res.KeptForLineage != 1 {
		t.Fatalf("result %+v", res)
	}
	for _, id := range succeeded {
		if exists(t, pool, id) {
			t.Errorf("job %s kept", id)
		}
	}
	if !exists(t, pool, s) || !exists(t, pool, r) || !exists(t, pool, dead) {
		t.Fatal("a job of another status, or its family, was deleted")
	}
	noOrphanEvents(t, pool)
}

// A prune never waits on a row another transaction holds: a job a worker
// has locked and a source a replay has locked are skipped (and with the
// source, its family), and taken by the next prune.
func TestPruneSkipsHeldRows(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	held := insert(t, pool, old(orgA, "SUCCEEDED"))
	source := insert(t, pool, old(orgA, "SUCCEEDED"))
	replayed := insert(t, pool, old(orgA, "SUCCEEDED"))
	link(t, pool, source, replayed)
	free := insert(t, pool, old(orgA, "SUCCEEDED"))
	tx := testdb.Begin(t, ctx, pool)
	testdb.LockJob(t, tx, held, "UPDATE")
	testdb.LockJob(t, tx, source, "NO KEY UPDATE")
	req := health.PruneRequest{Scope: testdb.Ptr(runledger.Organization(orgA)), FinishedBefore: time.Now().Add(-day)}
	res, err := health.Prune(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedJobs != 1 || res.Skipped != 2 || res.KeptForLineage != 1 || exists(t, pool, free) {
		t.Fatalf("beside held rows: %+v", res)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = health.Prune(ctx, pool, req)
	if err != nil || res.DeletedJobs != 3 || exists(t, pool, held) || exists(t, pool, source) || exists(t, pool, replayed) {
		t.Fatalf("once released: %+v %v", res, err)
	}
}

// A prune stopped after its first batch keeps what it committed, and a
// rerun finishes the work: the end state is that of one whole prune.
func TestPruneInterruptedAndRerun(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.DefineType(t, pool, "t")
	testdb.Exec(t, pool, `INSERT INTO job_queue (organization_id, job_type, status, max_attempts, attempt, stage, started_at, finished_at)
		SELECT $1, 't', 'SUCCEEDED', 3, 1, 'completed', now() - interval '3 days', now() - interval '2 days' - make_interval(secs => n)
		FROM generate_series(1, 250) n`, orgA)
	testdb.Exec(t, pool, `INSERT INTO job_events (organization_id, job_id, event_type) SELECT organization_id, id, 'ENQUEUED' FROM job_queue`)
	keep := insert(t, pool, recent(orgA, "SUCCEEDED"))
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	req := health.PruneRequest{Scope: testdb.Ptr(runledger.Organization(orgA)), FinishedBefore: time.Now().Add(-day), BatchSize: 100,
		Progress: func(health.PruneResult) { cancel() }}
	res, err := health.Prune(stop, pool, req)
	if !errors.Is(err, context.Canceled) || res.DeletedJobs != 100 {
		t.Fatalf("interrupted: %+v %v", res, err)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 151 {
		t.Fatalf("%d jobs after the first batch, want 151", n)
	}
	// The committed batch took its jobs' events with it.
	noOrphanEvents(t, pool)
	req.Progress = nil
	res, err = health.Prune(ctx, pool, req)
	if err != nil || res.DeletedJobs != 150 || !exists(t, pool, keep) || testdb.Count(t, pool, "job_queue") != 1 {
		t.Fatalf("rerun: %+v %v", res, err)
	}
	noOrphanEvents(t, pool)
}

// Beside workers claiming and completing, and replays of the jobs being
// pruned: no deadlock, no error, every lineage row keeps both its jobs,
// every replay that succeeded keeps its source, and nothing newer than the
// cutoff is deleted.
func TestPruneBesideClaimsCompletesAndReplays(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	testdb.DefineType(t, pool, "t")
	scope := runledger.Organization(orgA)
	testdb.Exec(t, pool, `INSERT INTO job_queue (organization_id, job_type, status, max_attempts, attempt, stage, started_at, finished_at)
		SELECT $1, 't', 'SUCCEEDED', 3, 1, 'completed', now() - interval '3 days', now() - interval '2 days' - make_interval(secs => n)
		FROM generate_series(1, 600) n`, orgA)
	testdb.Exec(t, pool, `INSERT INTO job_events (organization_id, job_id, event_type) SELECT organization_id, id, 'ENQUEUED' FROM job_queue`)
	sources := testdb.Column[uuid.UUID](t, pool, `SELECT id FROM job_queue ORDER BY finished_at LIMIT 200`)

	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 3)
	var replayed []uuid.UUID
	var enqueued int64
	// A worker: enqueue, claim, complete, until the prune is done.
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{Scope: scope, JobType: "t"}); err != nil {
				errc <- err
				return
			}
			enqueued++
			claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", Limit: 10, Lease: time.Minute})
			if err != nil {
				errc <- err
				return
			}
			for _, j := range claimed {
				if _, err := lease.Complete(ctx, pool, testdb.CompleteRequest(j)); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	// Replays of the oldest jobs, racing the prune for them.
	go func() {
		defer wg.Done()
		for _, id := range sources {
			out, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: id, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
			if err != nil {
				errc <- err
				return
			}
			if _, ok := out.(replay.Replayed); ok {
				replayed = append(replayed, id)
			}
		}
	}()
	res, err := health.Prune(ctx, pool, health.PruneRequest{Scope: &scope, FinishedBefore: time.Now().Add(-day), BatchSize: 20})
	close(done)
	wg.Wait()
	close(errc)
	if err != nil {
		t.Fatal(err)
	}
	for err := range errc {
		t.Fatal(err)
	}
	for _, id := range replayed {
		if !exists(t, pool, id) {
			t.Errorf("replayed source %s was deleted", id)
		}
	}
	// Nothing newer than the cutoff was deleted: every job the worker
	// enqueued (finished or not) and every replay is there.
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue WHERE finished_at >= now() - interval '1 day' OR finished_at IS NULL`); n != enqueued+int64(len(replayed)) || enqueued == 0 {
		t.Fatalf("%d jobs newer than the cutoff, want the %d enqueued and %d replays", n, enqueued, len(replayed))
	}
	// Left: the replayed sources (their replays are pending) and the jobs
	// skipped while a replay held them (which then replayed them, so a job
	// may be both).
	oldJobs := `SELECT count(*) FROM job_queue WHERE finished_at < now() - interval '1 day'`
	if left := testdb.Scalar[int64](t, pool, oldJobs); left < int64(len(replayed)) || left > int64(len(replayed))+res.Skipped {
		t.Fatalf("%d old jobs left: %d replayed sources, result %+v", left, len(replayed), res)
	}
	// Once the races are over, a rerun leaves exactly the replayed sources.
	res, err = health.Prune(ctx, pool, health.PruneRequest{Scope: &scope, FinishedBefore: time.Now().Add(-day)})
	if err != nil || testdb.Scalar[int64](t, pool, oldJobs) != int64(len(replayed)) || res.KeptForLineage != int64(len(replayed)) {
		t.Fatalf("rerun: %+v %v; %d replayed sources", res, err, len(replayed))
	}
	// Nothing the worker wrote was deleted: every job left has its events.
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue q WHERE NOT EXISTS (SELECT 1 FROM job_events e WHERE e.organization_id = q.organization_id AND e.job_id = q.id)`); n != 0 {
		t.Fatalf("%d jobs lost their events", n)
	}
	noOrphanEvents(t, pool)
}

// Bad requests fail with their code before any database work.
func TestPruneValidation(t *testing.T) {
	t.Parallel()
	pool := testdb.ClosedPool(t)
	ctx := context.Background()
	cutoff := time.Now()
	for _, c := range []struct {
		req  health.PruneRequest
		code runledger.Code
	}{
		{health.PruneRequest{}, "health.prune_cutoff_invalid"},
		{health.PruneRequest{FinishedBefore: cutoff, Statuses: []runledger.JobStatus{runledger.JobStatusPending}}, "health.prune_status_invalid"},
		{health.PruneRequest{FinishedBefore: cutoff, Statuses: []runledger.JobStatus{"succeeded"}}, "health.prune_status_invalid"},
		{health.PruneRequest{FinishedBefore: cutoff, BatchSize: -1}, "health.prune_batch_invalid"},
		{health.PruneRequest{FinishedBefore: cutoff, BatchSize: health.MaxPruneBatch + 1}, "health.prune_batch_invalid"},
		{health.PruneRequest{FinishedBefore: cutoff, Scope: testdb.Ptr(runledger.Organization(uuid.Nil))}, runledger.CodeOrganizationInvalid},
		{health.PruneRequest{FinishedBefore: cutoff, OlderThan: time.Hour}, "health.prune_cutoff_invalid"},
		{health.PruneRequest{OlderThan: -time.Hour}, "health.prune_cutoff_invalid"},
	} {
		_, err := health.Prune(ctx, pool, c.req)
		testdb.WantCode(t, err, c.code)
	}
}

// One TryPrune at a time: while another session holds the prune lock it
// does nothing and says so; once released it prunes.
func TestTryPruneOneAtATime(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	id := insert(t, pool, old(orgA, "SUCCEEDED"))
	holder := testdb.Begin(t, ctx, pool)
	testdb.Exec(t, holder, `SELECT pg_advisory_lock($1)`, health.PruneLockKey)
	req := health.PruneRequest{FinishedBefore: time.Now().Add(-day)}
	res, ran, err := health.TryPrune(ctx, pool, req)
	if err != nil || ran || res.DeletedJobs != 0 || !exists(t, pool, id) {
		t.Fatalf("beside a held lock: ran %v %+v %v", ran, res, err)
	}
	testdb.Exec(t, holder, `SELECT pg_advisory_unlock($1)`, health.PruneLockKey)
	res, ran, err = health.TryPrune(ctx, pool, req)
	if err != nil || !ran || res.DeletedJobs != 1 || exists(t, pool, id) {
		t.Fatalf("once released: ran %v %+v %v", ran, res, err)
	}
	// The lock was released: a second run takes it again.
	if _, ran, err = health.TryPrune(ctx, pool, req); err != nil || !ran {
		t.Fatalf("again: ran %v %v", ran, err)
	}
}

// A prune's OlderThan is measured against the database clock: the cutoff
// it reports lies between the server's now() before and after the call,
// minus OlderThan, and it deletes what finished before that and keeps the
// rest.
func TestPruneOlderThanUsesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := testdb.Context(t)
	old := insert(t, pool, job{org: orgA, status: "SUCCEEDED", finished: 2 * time.Hour})
	recent := insert(t, pool, job{org: orgA, status: "SUCCEEDED", finished: 30 * time.Minute})
	before := testdb.Scalar[time.Time](t, pool, `SELECT now()`)
	res, err := health.Prune(ctx, pool, health.PruneRequest{OlderThan: time.Hour})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	after := testdb.Scalar[time.Time](t, pool, `SELECT now()`)
	if res.Cutoff.Before(before.Add(-time.Hour)) || res.Cutoff.After(after.Add(-time.Hour)) {
		t.Errorf("cutoff %s is not the database clock minus 1h (between %s and %s)", res.Cutoff, before.Add(-time.Hour), after.Add(-time.Hour))
	}
	if exists(t, pool, old) || !exists(t, pool, recent) || res.DeletedJobs != 1 {
		t.Errorf("deleted %d; the job that finished 2h ago exists: %v, 30m ago: %v; want only the first deleted",
			res.DeletedJobs, exists(t, pool, old), exists(t, pool, recent))
	}
}
