package inspect_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/replay"
)

func TestGetDetailReadsJobEventsAndLineage(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	scope := runledger.Organization(uuid.New())
	source := testdb.Completed(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
	out, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: source.ID,
		ExpectedRunNumber: source.RunNumber, Key: "k", Reason: "again"})
	r, ok := out.(replay.Replayed)
	if err != nil || !ok {
		t.Fatalf("replay outcome = %#v, %v", out, err)
	}

	d, err := inspect.GetDetail(ctx, pool, inspect.DetailRequest{Scope: scope, JobID: source.ID})
	if err != nil {
		t.Fatal(err)
	}
	if d.Job.ID != source.ID || d.Job.Status != runledger.JobStatusSucceeded || len(d.Events) != 3 {
		t.Fatalf("source detail job %s %s, %d events; want %s SUCCEEDED, 3 events", d.Job.ID, d.Job.Status, len(d.Events), source.ID)
	}
	if len(d.Replays) != 1 || d.Replays[0].ReplayJobID != r.Replay.JobID || d.ReplayedFrom != nil {
		t.Fatalf("source lineage = %+v, %+v", d.Replays, d.ReplayedFrom)
	}

	d, err = inspect.GetDetail(ctx, pool, inspect.DetailRequest{Scope: scope, JobID: r.Replay.JobID})
	if err != nil {
		t.Fatal(err)
	}
	if d.Job.ID != r.Replay.JobID || len(d.Events) != 1 || d.Replays == nil || len(d.Replays) != 0 {
		t.Fatalf("replay detail = %+v", d)
	}
	if d.ReplayedFrom == nil || d.ReplayedFrom.SourceJobID != source.ID || d.ReplayedFrom.Reason != "again" {
		t.Fatalf("replay origin = %+v", d.ReplayedFrom)
	}

	_, err = inspect.GetDetail(ctx, pool, inspect.DetailRequest{Scope: runledger.Global(), JobID: source.ID})
	testdb.WantCode(t, err, runledger.CodeJobNotFound)
}

// GetDetail pages a long history and many replays: the newest events in
// order with MoreEvents set, the page before through EventsBefore, and the
// replays oldest first through ReplaysAfter; every event and replay is
// seen exactly once across the pages.
func TestGetDetailPagesEventsAndReplays(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	scope := runledger.Organization(uuid.New())
	source := testdb.Completed(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})
	// 3 events from its life, 7 more written by hand: 10.
	for i := 0; i < 7; i++ {
		testdb.Exec(t, pool, `INSERT INTO job_events (organization_id, job_id, run_number, event_type, payload) VALUES ($3, $1, 1, 'PROGRESS', jsonb_build_object('i', $2::int))`, source.ID, i, testdb.Tenant(scope))
	}
	for i := 0; i < 5; i++ {
		testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: source.ID,
			ExpectedRunNumber: 1, Key: uuid.NewString(), Reason: "again"}))
	}
	all := testdb.Column[int64](t, pool, `SELECT id FROM job_events WHERE job_id = $1 ORDER BY id`, source.ID)

	var seen []int64
	req := inspect.DetailRequest{Scope: scope, JobID: source.ID, EventLimit: 4, ReplayLimit: 2}
	var replays []uuid.UUID
	for page := 0; ; page++ {
		d, err := inspect.GetDetail(ctx, pool, req)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(d.Events))
		for i, e := range d.Events {
			ids[i] = e.ID
		}
		seen = append(ids, seen...)
		for _, r := range d.Replays {
			replays = append(replays, r.ReplayJobID)
		}
		if len(d.Events) > 4 || len(d.Replays) > 2 {
			t.Fatalf("page %d: %d events, %d replays over the limits", page, len(d.Events), len(d.Replays))
		}
		if !d.MoreEvents && !d.MoreReplays {
			break
		}
		req.EventsBefore, req.ReplaysAfter = nil, nil
		if d.MoreEvents {
			req.EventsBefore = &d.Events[0].ID
		} else {
			req.EventLimit = 1
			req.EventsBefore = testdb.Ptr(all[0])
		}
		if d.MoreReplays {
			req.ReplaysAfter = &d.Replays[len(d.Replays)-1].ReplayJobID
		} else {
			req.ReplayLimit = 1
			req.ReplaysAfter = &replays[len(replays)-1]
		}
		if page > 10 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != len(all) {
		t.Fatalf("saw events %v, want %v", seen, all)
	}
	for i := range all {
		if seen[i] != all[i] {
			t.Fatalf("saw events %v, want %v", seen, all)
		}
	}
	want := testdb.Column[uuid.UUID](t, pool, `SELECT replay_job_id FROM job_replays WHERE source_job_id = $1 ORDER BY created_at, replay_job_id`, source.ID)
	if len(replays) != 5 || len(want) != 5 {
		t.Fatalf("saw %d replays, want 5", len(replays))
	}
	for i := range want {
		if replays[i] != want[i] {
			t.Fatalf("replays %v, want %v", replays, want)
		}
	}
	if _, err := inspect.GetDetail(ctx, pool, inspect.DetailRequest{Scope: scope, JobID: source.ID, EventLimit: 1001}); !errors.Is(err, runledger.Code("job.event_limit_invalid")) {
		t.Fatalf("event limit over 1000: %v", err)
	}
}
