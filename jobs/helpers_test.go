package jobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// setup returns a fresh migrated database with job type "email" defined
// (defaults: 8 attempts, 900 s, priority 100, enabled).
func setup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.New(t)
	ctx := testdb.Context(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "email"})
	return ctx, pool
}

// claimOnly claims with limit 10 and fails unless exactly the job want is
// leased.
func claimOnly(t *testing.T, ctx context.Context, pool *pgxpool.Pool, want uuid.UUID) runledger.Job {
	t.Helper()
	got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{})
	if len(got) != 1 || got[0].ID != want {
		t.Fatalf("claimed %v, want only %s", testdb.IDs(got), want)
	}
	return got[0]
}

// lastEvent returns a job's newest event, read with test SQL.
func lastEvent(t *testing.T, ctx context.Context, q jobs.Querier, id uuid.UUID) (typ string, attempt *int32, payload map[string]any, occurred time.Time) {
	t.Helper()
	var raw []byte
	err := q.QueryRow(ctx, `SELECT event_type::text, attempt, payload, occurred_at FROM job_events
		WHERE job_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&typ, &attempt, &raw, &occurred)
	if err != nil {
		t.Fatalf("read last event: %v", err)
	}
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatalf("decode event payload %s: %v", raw, err)
	}
	return typ, attempt, payload, occurred
}
