package txn_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A pipeline pgx refuses to build (an argument it cannot encode) sends
// nothing: the error is db.query_failed naming the pipeline, not its BEGIN,
// and not commit-unconfirmed although it carried COMMIT; the connection
// stays usable.
func TestUnsentBatchNamesThePipeline(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	url := testdb.NewURL(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.DefaultQueryExecMode = mode
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := txn.Own(ctx, pool, "test operation")
		if err != nil {
			t.Fatal(err)
		}
		b := s.Batch(ctx)
		txn.Queue(b, "unencodable statement", func(q db.DBTX) (int32, error) {
			var n int32
			err := q.QueryRow(ctx, "SELECT $1::int", struct{ x chan int }{}).Scan(&n)
			return n, err
		})
		b.Commit(ctx)
		err = b.Send(ctx)
		e := testdb.WantCode(t, err, runledger.CodeQueryFailed)
		if !strings.Contains(e.Detail, "nothing was sent") || strings.Contains(e.Detail, "begin") {
			t.Errorf("%s: detail %q, want the pipeline named and nothing sent", mode, e.Detail)
		}
		s.End(ctx)
		var one int32
		if err := pool.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Errorf("%s: the pool's connection is not usable after: %v", mode, err)
		}
		pool.Close()
	}
}
