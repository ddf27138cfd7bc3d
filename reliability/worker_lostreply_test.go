package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
	"github.com/runledger-go/runledger/worker"
)

// connSet is the pool's connections, for the test to close them all when
// it takes the network down.
type connSet struct {
	mu sync.Mutex
	cs []net.Conn
}

func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cs = append(s.cs, c)
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cs {
		_ = c.Close()
	}
	s.cs = nil
}

// TestWorkerCompletionWithALostReplyIsReportedSucceeded loses the reply
// to a worker's completion (the proxy swallows it after the statement
// committed, and closes the connection), and keeps the network down while
// the worker retries: its read-back of the job fails, and so does the
// first retry of the write. Once the network is back, the retried
// completion is refused by the fence, since the first one landed. The
// worker must tell that refusal from a lost lease: the job SUCCEEDED once,
// by its own write, and OnFinished must say succeeded, not lost ("nothing
// was written"). Ordered by what the proxy and the dialer see: the
// completion's result passing the proxy, then two refused dials.
func TestWorkerCompletionWithALostReplyIsReportedSucceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createEffects(t, e.admin)
	defineTypes(t, e.admin, map[string]int32{typeBlock: 3})
	j := enqueueN(t, e.admin, typeBlock, 1)[0]

	addr, err := pgproxy.TargetAddr(e.url)
	if err != nil {
		t.Fatal(err)
	}
	var armed, commitArmed, down atomic.Bool
	var conns connSet
	var refused atomic.Int64
	// The reply swallowed is the one that commits the completion: on one
	// server the completion's own (one statement, SELECT 1); on Citus,
	// where the completion is its write (SELECT 1) and then its events
	// with COMMIT, the COMMIT that follows the write.
	lost := "SELECT 1"
	if testdb.Citus() {
		lost = "COMMIT"
	}
	var proxy *pgproxy.Proxy
	proxy, err = pgproxy.Start(addr, pgproxy.Options{Inspect: true, Observe: func(m pgproxy.Message) {
		// The first command that returns one row once the handler runs:
		// the completion (no heartbeat round, claim or recovery runs
		// then). The network goes down as its committing reply is
		// swallowed, once.
		if m.Tag() == "SELECT 1" && armed.CompareAndSwap(true, false) {
			if lost == "SELECT 1" {
				down.Store(true)
				conns.closeAll()
				return
			}
			proxy.DropReply(lost)
			commitArmed.Store(true)
		}
		if m.Tag() == "COMMIT" && commitArmed.CompareAndSwap(true, false) {
			down.Store(true)
			conns.closeAll()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg, err := pgxpool.ParseConfig(proxy.ConnString(e.url))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
		if down.Load() {
			refused.Add(1)
			return nil, errors.New("test: the network is down")
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		if err == nil {
			conns.add(c)
		}
		return c, err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	started := make(chan struct{})
	release := make(chan struct{})
	w := startWorker(t, pool, worker.Config{WorkerID: "lost-reply", Lease: 30 * time.Second, HeartbeatInterval: 29 * time.Second,
		PollInterval: time.Hour, DisableListen: true, RecoveryInterval: -1},
		func(w *worker.Worker) error {
			return worker.Register(w, typeBlock, func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
				close(started)
				<-release
				return map[string]string{"by": "lost-reply"}, nil
			})
		})
	<-started
	// The fetcher claims again at once after finding work: that claim
	// answers SELECT 0, which the proxy lets through.
	if lost == "SELECT 1" {
		proxy.DropReply(lost)
	}
	armed.Store(true)
	close(release)
	e.waitFor("the completion to land", func() bool {
		return countWhere(t, e.admin, `id = $1 AND status = 'SUCCEEDED'`, j.ID) == 1
	})
	e.waitFor("the worker to retry against the down network twice", func() bool { return refused.Load() >= 2 })
	down.Store(false)
	f := w.waitFinished("the job's outcome", func(f worker.Finished) bool { return f.Job.ID == j.ID })
	if proxy.Dropped() != 1 {
		t.Fatalf("the proxy swallowed %d replies, want 1", proxy.Dropped())
	}
	if got, want := history(t, e.admin, j.ID), "ENQUEUED LEASED@1 SUCCEEDED@1"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if f.Outcome != worker.OutcomeSucceeded || f.Job.Status != "SUCCEEDED" {
		t.Errorf("the worker reported %s (%v) for a completion it wrote, want succeeded", f.Outcome, f.Err)
	}
}
