package testdb

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Round trips are counted on the wire: a net.Conn wrapper, installed with
// pgx's ConnConfig.DialFunc, counts the client's writes that follow a read
// from the server (or come first). The client waits for the server between
// two such writes, so each one starts a round trip; writes in a row (a
// batch written in pieces) are one.

// TripCounter counts round trips on the connections it wraps.
type TripCounter struct {
	mu       sync.Mutex
	trips    int
	readLast bool
}

func (c *TripCounter) wrote() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readLast {
		c.trips++
		c.readLast = false
	}
}

func (c *TripCounter) read() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readLast = true
}

// Count returns the round trips counted so far.
func (c *TripCounter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips
}

type countingConn struct {
	net.Conn
	c *TripCounter
}

func (cc countingConn) Write(b []byte) (int, error) {
	cc.c.wrote()
	return cc.Conn.Write(b)
}

func (cc countingConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	if n > 0 {
		cc.c.read()
	}
	return n, err
}

// CountingPool opens a one-connection pool on a fresh database whose
// connection counts its round trips. The pool never pings a connection it
// hands out (pgxpool pings one idle for over a second by default, a round
// trip of the pool's, not of the operation).
func CountingPool(t testing.TB) (*pgxpool.Pool, *TripCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := &TripCounter{readLast: true}
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, c: counter}, nil
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
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
