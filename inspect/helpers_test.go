package inspect_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
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
