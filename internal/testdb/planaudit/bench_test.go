package planaudit

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/internal/testdb"
)

// benchedStatements are the statements BenchmarkStatements times: the
// replay's (with the Citus form's source lock) and the
// enqueue's, the claim of one tenant, and the completion,
// the cancel and the release as one server runs them and as Citus does
// (without their events).
var benchedStatements = map[string]bool{
	"JobLockByIdempotencyKeyGlobal": true, "JobLockForReplay": true, "JobReplayGetForRequest": true,
	"JobReplayGetForRequestAfterSourceLock": true, "JobReplayInsert": true, "JobEnqueue": true,
	"JobClaimTenant": true, "JobReplayBulkInsert": true, "JobReplaySourceRouted": true,
	"JobCompleteMany": true, "JobCompleteManyRouted": true,
	"JobCancel": true, "JobCancelRouted": true, "JobReleaseMany": true, "JobReleaseManyRouted": true,
}

// oneServerOnly are benched statements the library never sends to Citus.
var oneServerOnly = map[string]bool{"JobCompleteMany": true, "JobCancel": true, "JobReleaseMany": true}

// BenchmarkStatements executes each statement alone on the audit's data,
// as prepared with the audit's values, in a transaction rolled back after
// each execution (the rollback is outside the timing): ns/op is one
// execution, on one server or, with RUNLEDGER_TEST_CITUS=1, on Citus
// (docs/SCALING.md; make bench-citus runs both).
func BenchmarkStatements(b *testing.B) {
	ctx := context.Background()
	queries, err := Load("../../../db")
	if err != nil {
		b.Fatal(err)
	}
	pool := testdb.New(b)
	values := seedAuditData(b, ctx, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	c := conn.Conn()
	for _, q := range queries {
		if !benchedStatements[q.Name] {
			continue
		}
		if testdb.Citus() && oneServerOnly[q.Name] {
			// Never sent to Citus: its ordered lock CTE is planned in
			// steps there and fails (the Routed form runs instead).
			continue
		}
		b.Run(q.Name, func(b *testing.B) {
			if _, err := c.Exec(ctx, "PREPARE timed AS "+q.Body()); err != nil {
				b.Fatal(err)
			}
			defer c.Exec(context.Background(), "DEALLOCATE timed") //nolint:errcheck
			var types []string
			if err := c.QueryRow(ctx, `SELECT coalesce(parameter_types::text[], '{}') FROM pg_prepared_statements WHERE name = 'timed'`).Scan(&types); err != nil {
				b.Fatal(err)
			}
			args := make([]string, len(types))
			for i, typ := range types {
				lit, err := values.literal(q.Params[i], typ)
				if err != nil {
					b.Fatal(err)
				}
				args[i] = lit
			}
			stmt := "EXECUTE timed"
			if len(args) > 0 {
				stmt += "(" + strings.Join(args, ", ") + ")"
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				tx, err := c.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				_, err = tx.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol)
				b.StopTimer()
				_ = tx.Rollback(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
