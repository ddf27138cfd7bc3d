package validate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/validate"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// jsonbSeeds are the edges of what jsonb stores.
var jsonbSeeds = []string{
	`{}`, `[1, "a", null, true]`, `{"a": {"b": [1.5e3, -0.0]}}`,
	`1e131071`, `9.999e131071`, `1e131072`, `-1e131072`, `10e131071`, `0.1e131072`,
	`1e-16383`, `1e-16384`, `1.5e-16383`, `0e999999`, `0e1073741822`, `0e1073741823`, `0e-16384`,
	`0.` + strings.Repeat("0", 16383), `0.` + strings.Repeat("0", 16384),
	"1" + strings.Repeat("0", 131071), "1" + strings.Repeat("0", 131072),
	`"\u0000"`, `"a\u0000b"`, `"\ud800"`, `"\udc00"`, `"\ud800\udc00"`, `"\ud800x"`, `"\ud800\u0041"`, `"\\u0000"`,
	`"é€😀"`, "\"\xff\"", "", " ", `{"a":1,"a":2}`, "\f1", "1 ", "\t[\n]\r",
}

// acceptsJSONB reports whether PostgreSQL stores b as jsonb, sent as the
// library sends a payload or an output (a []byte parameter).
func acceptsJSONB(t testing.TB, pool *pgxpool.Pool, b []byte) (bool, error) {
	var ok bool
	err := pool.QueryRow(context.Background(), `SELECT $1::jsonb IS NOT NULL`, b).Scan(&ok)
	if pgErr, isPg := err.(*pgconn.PgError); isPg && strings.HasPrefix(pgErr.Code, "22") {
		return false, err
	}
	if err != nil {
		t.Fatalf("jsonb of %q: %v", b, err)
	}
	return ok, nil
}

// TestJSONBIsWhatTheDatabaseStores checks validate.JSONB against the
// server on the seeds: it accepts exactly what jsonb stores.
func TestJSONBIsWhatTheDatabaseStores(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	for _, s := range jsonbSeeds {
		checkJSONB(t, pool, []byte(s))
	}
}

func checkJSONB(t testing.TB, pool *pgxpool.Pool, b []byte) {
	goErr := validate.JSONB(b)
	dbOK, dbErr := acceptsJSONB(t, pool, b)
	switch {
	case goErr == nil && !dbOK:
		t.Fatalf("validate.JSONB accepts %.80q, the database refuses it: %v", b, dbErr)
	case goErr != nil && dbOK:
		t.Fatalf("validate.JSONB refuses %.80q (%v), the database stores it", b, goErr)
	}
}

// FuzzJSONB: what validate.JSONB accepts, jsonb stores, and the other
// way round, checked against a real server.
func FuzzJSONB(f *testing.F) {
	for _, s := range jsonbSeeds {
		f.Add([]byte(s))
	}
	pool := testdb.New(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		checkJSONB(t, pool, b)
	})
}
