package console_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/console"
	"github.com/runledger-go/runledger/internal/testdb"
)

// Example mounts the console under /ops of an application's mux, behind
// the application's own authentication: Operator names the signed-in
// operator, whose name every action records.
func Example() {
	ctx := context.Background()
	pool := exampleDB(ctx) // in an application: pgxpool.New with your database URL
	defer pool.Close()

	h, err := console.New(pool, console.Options{
		Prefix: "/ops",
		Operator: func(r *http.Request) (string, bool) {
			// The application's session check; a header stands in here.
			name := r.Header.Get("X-Example-Operator")
			return name, name != ""
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	// ... the application's own routes, then http.ListenAndServe(addr, mux) ...

	get := func(path, operator string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if operator != "" {
			req.Header.Set("X-Example-Operator", operator)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
	fmt.Println("health check:", get("/ops/healthz", ""))
	fmt.Println("job list, signed in:", get("/ops/jobs", "alice"))
	fmt.Println("metrics, anonymous:", get("/ops/metrics", ""))
	// Output:
	// health check: 200
	// job list, signed in: 200
	// metrics, anonymous: 401
}

// exampleDB gives the example a fresh migrated database.
func exampleDB(ctx context.Context) *pgxpool.Pool {
	url, err := testdb.NewURLForExample()
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	return pool
}
