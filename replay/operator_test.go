package replay_test

import (
	"strings"
	"testing"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// TestOperatorRecordedWhenSet: a request's Operator is in the replay's
// ENQUEUED event as "operator" (six keys); a bad one is refused before any
// database work.
func TestOperatorRecordedWhenSet(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	src := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	req := replay.Request{Scope: runledger.Global(), SourceJobID: src, ExpectedRunNumber: 1, Key: "k", Reason: "r", Operator: "alice@example.com"}
	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, req))
	keys := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_events e, jsonb_object_keys(e.payload) WHERE e.job_id = $1`, got.Replay.JobID)
	op := testdb.Scalar[string](t, pool, `SELECT payload->>'operator' FROM job_events WHERE job_id = $1`, got.Replay.JobID)
	if keys != 6 || op != "alice@example.com" {
		t.Fatalf("ENQUEUED payload has %d keys and operator %q, want 6 and alice@example.com", keys, op)
	}
	for _, bad := range []string{" ", "a\x00b", "\xff", strings.Repeat("a", 256)} {
		req.Operator = bad
		_, err := replay.SucceededJob(ctx, pool, req)
		testdb.WantCode(t, err, "job.operator_invalid")
	}
}
