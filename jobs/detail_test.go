package jobs_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
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

	d, err := jobs.GetDetail(ctx, pool, scope, source.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Job.ID != source.ID || d.Job.Status != runledger.JobStatusSucceeded || len(d.Events) != 3 {
		t.Fatalf("source detail job %s %s, %d events; want %s SUCCEEDED, 3 events", d.Job.ID, d.Job.Status, len(d.Events), source.ID)
	}
	if len(d.Replays) != 1 || d.Replays[0].ReplayJobID != r.Replay.JobID || d.ReplayedFrom != nil {
		t.Fatalf("source lineage = %+v, %+v", d.Replays, d.ReplayedFrom)
	}

	d, err = jobs.GetDetail(ctx, pool, scope, r.Replay.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Job.ID != r.Replay.JobID || len(d.Events) != 1 || d.Replays == nil || len(d.Replays) != 0 {
		t.Fatalf("replay detail = %+v", d)
	}
	if d.ReplayedFrom == nil || d.ReplayedFrom.SourceJobID != source.ID || d.ReplayedFrom.Reason != "again" {
		t.Fatalf("replay origin = %+v", d.ReplayedFrom)
	}

	_, err = jobs.GetDetail(ctx, pool, runledger.Global(), source.ID)
	testdb.WantCode(t, err, runledger.CodeJobNotFound)
}
