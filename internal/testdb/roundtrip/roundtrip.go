// Package roundtrip counts a pgx pool's round trips on the wire, for the
// tests that pin what an operation costs (through testdb.CountingPool) and
// for the bench's comparison with River. It is tooling: no library package
// imports it.
package roundtrip

import (
	"context"
	"net"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Counter counts round trips on the connections it wraps: the client's
// writes that follow a read from the server (or come first). The client
// waits for the server between two such writes, so each starts a round
// trip; writes in a row (a batch written in pieces) are one.
type Counter struct {
	mu       sync.Mutex
	trips    int
	readLast bool
}

// Pool sets cfg up to be counted and returns its counter: one connection,
// dialed through the counting wrapper, never pinged when handed out
// (pgxpool pings a connection idle for over a second by default, a round
// trip of the pool's, not of the operation).
func Pool(cfg *pgxpool.Config) *Counter {
	c := &Counter{readLast: true}
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, c: c}, nil
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	return c
}

// Count returns the round trips counted so far.
func (c *Counter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips
}

func (c *Counter) wrote() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readLast {
		c.trips++
		c.readLast = false
	}
}

func (c *Counter) read() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readLast = true
}

type countingConn struct {
	net.Conn
	c *Counter
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
