package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// TestLongestJobTypeFitsEveryIndex: a job type of MaxJobTypeBytes, keyed
// with a key of runledger.MaxKeyBytes and a resource key of the same
// length, is defined, enqueued, claimed and read back: the limit fits
// every index that holds the type.
func TestLongestJobTypeFitsEveryIndex(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	jobType := strings.Repeat("t", runledger.MaxJobTypeBytes)
	if _, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: jobType}); err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("k", runledger.MaxKeyBytes)
	res, err := jobs.Enqueue(ctx, pool, jobs.EnqueueRequest{JobType: jobType, IdempotencyKey: key,
		ExecutionResourceKey: strings.Repeat("r", runledger.MaxKeyBytes)})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := lease.Claim(ctx, pool, lease.ClaimRequest{WorkerID: "w", JobTypes: []string{jobType}, Limit: 1, Lease: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].ID != res.Job.ID {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if got, err := inspect.Get(ctx, pool, runledger.Global(), res.Job.ID); err != nil || got.JobType != jobType {
		t.Fatalf("get = %v, %v", got.JobType, err)
	}
}
