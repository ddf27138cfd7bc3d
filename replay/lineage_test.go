package replay_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
	"github.com/runledger-go/runledger/replay"
)

func TestListAndOriginReadLineage(t *testing.T) {
	t.Parallel()
	ctx, pool := testdb.Context(t), testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	org := uuid.New()
	scope := runledger.Organization(org)
	source, err := lease.Complete(ctx, pool, testdb.CompleteRequest(testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})))
	if err != nil {
		t.Fatal(err)
	}
	other := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{Scope: scope})

	none, _, err := replay.List(ctx, pool, scope, source.ID, replay.LineagePage{})
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("List before any = %#v, %v", none, err)
	}
	var replayIDs []uuid.UUID
	for _, key := range []string{"k1", "k2"} {
		out, err := replay.SucceededJob(ctx, pool, replay.Request{Scope: scope, SourceJobID: source.ID,
			ExpectedRunNumber: source.RunNumber, Key: key, Reason: "reprocess " + key})
		if err != nil {
			t.Fatal(err)
		}
		r, ok := out.(replay.Replayed)
		if !ok {
			t.Fatalf("replay outcome = %#v", out)
		}
		replayIDs = append(replayIDs, r.Replay.JobID)
	}
	// The first replay moves on; the list shows its current state.
	testdb.LeaseJob(t, ctx, pool, replayIDs[0])

	list, _, err := replay.List(ctx, pool, scope, source.ID, replay.LineagePage{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("List = %+v", list)
	}
	for i, l := range list {
		switch {
		case l.ReplayJobID != replayIDs[i], l.SourceJobID != source.ID, l.SourceRunNumber != 1:
			t.Fatalf("lineage %d = %+v", i, l)
		case l.ReplayRequestKey != []string{"k1", "k2"}[i], l.Reason != "reprocess "+l.ReplayRequestKey:
			t.Fatalf("lineage %d key/reason = %q/%q", i, l.ReplayRequestKey, l.Reason)
		case l.ReplayStatus == nil || l.ReplayRunNumber == nil || *l.ReplayRunNumber != 1:
			t.Fatalf("lineage %d replay state = %v/%v", i, l.ReplayStatus, l.ReplayRunNumber)
		}
	}
	if *list[0].ReplayStatus != runledger.JobStatusLeased || *list[1].ReplayStatus != runledger.JobStatusPending {
		t.Fatalf("replay statuses = %s, %s; want LEASED, PENDING", *list[0].ReplayStatus, *list[1].ReplayStatus)
	}

	from, err := replay.Origin(ctx, pool, scope, replayIDs[1])
	if err != nil {
		t.Fatal(err)
	}
	if from == nil || from.SourceJobID != source.ID || from.ReplayJobID != replayIDs[1] || from.ReplayRequestKey != "k2" || from.Reason != "reprocess k2" {
		t.Fatalf("Origin = %+v", from)
	}
	for _, id := range []uuid.UUID{source.ID, other.ID} {
		if from, err := replay.Origin(ctx, pool, scope, id); err != nil || from != nil {
			t.Fatalf("Origin(not a replay) = %+v, %v; want nil, nil", from, err)
		}
	}

	for _, wrong := range []runledger.Scope{runledger.Global(), runledger.Organization(uuid.New())} {
		_, _, err := replay.List(ctx, pool, wrong, source.ID, replay.LineagePage{})
		testdb.WantCode(t, err, runledger.CodeJobNotFound)
		_, err = replay.Origin(ctx, pool, wrong, replayIDs[0])
		testdb.WantCode(t, err, runledger.CodeJobNotFound)
	}
}

func TestListAndOriginReadLineageInsertedByHand(t *testing.T) {
	t.Parallel()
	ctx, pool := testdb.Context(t), testdb.New(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	source, err := lease.Complete(ctx, pool, testdb.CompleteRequest(testdb.Leased(t, ctx, pool, jobs.EnqueueRequest{})))
	if err != nil {
		t.Fatal(err)
	}
	copyJob := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{})
	testdb.Exec(t, pool, `INSERT INTO job_replays (replay_job_id, source_job_id, source_run_number, replay_request_key, reason)
		VALUES ($1, $2, 1, 'manual', 'by hand')`, copyJob.ID, source.ID)
	list, _, err := replay.List(ctx, pool, runledger.Global(), source.ID, replay.LineagePage{})
	if err != nil || len(list) != 1 || list[0].ReplayJobID != copyJob.ID || *list[0].ReplayStatus != runledger.JobStatusPending {
		t.Fatalf("List = %+v, %v", list, err)
	}
	from, err := replay.Origin(ctx, pool, runledger.Global(), copyJob.ID)
	if err != nil || from == nil || from.SourceJobID != source.ID || from.Reason != "by hand" {
		t.Fatalf("Origin = %+v, %v", from, err)
	}
}
