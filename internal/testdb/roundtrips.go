package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb/roundtrip"
)

// TripCounter counts round trips on the wire (package roundtrip).
type TripCounter = roundtrip.Counter

// CountingPool opens a one-connection pool on a fresh database whose
// connection counts its round trips and is never pinged by the pool.
func CountingPool(t testing.TB) (*pgxpool.Pool, *TripCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := roundtrip.Pool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, counter
}

// Trips runs fn and returns the round trips it made on c's connections.
func Trips(c *TripCounter, fn func()) int {
	before := c.Count()
	fn()
	return c.Count() - before
}
