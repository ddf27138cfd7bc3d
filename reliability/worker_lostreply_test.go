package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
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

// lostReplyRig is a worker whose first completion commits while its reply
// is lost, the network going down with it: the proxy swallows the reply
// that commits the completion and closes every connection of the worker's
// pool, and the pool's dials are refused until up is called.
type lostReplyRig struct {
	e       *env
	w       *runner
	proxy   *pgproxy.Proxy
	release chan struct{} // closing it lets the handler return its output
	armed   atomic.Bool   // the handler returned: its completion is the next command returning a SUCCEEDED job
	down    atomic.Bool
	downAt  atomic.Int64 // when the network went down, in Unix nanoseconds
	refused atomic.Int64 // dials refused while down
}

// newLostReplyRig starts a worker with lease on one job of typeBlock, whose
// handler runs until rig.release is closed; it returns once the handler
// runs, with the job.
func newLostReplyRig(t *testing.T, leaseFor time.Duration) (*lostReplyRig, runledger.Job) {
	t.Helper()
	rig := &lostReplyRig{e: newEnv(t), release: make(chan struct{})}
	e := rig.e
	createEffects(t, e.admin)
	defineTypes(t, e.admin, map[string]int32{typeBlock: 3})
	j := enqueueN(t, e.admin, typeBlock, 1)[0]

	addr, err := pgproxy.TargetAddr(e.url)
	if err != nil {
		t.Fatal(err)
	}
	var commitArmed, succeededRow atomic.Bool
	var conns connSet
	goDown := func() {
		rig.downAt.Store(time.Now().UnixNano())
		rig.down.Store(true)
		conns.closeAll()
	}
	// The reply swallowed is the one that commits the completion: on one
	// server the completion's own (one statement, SELECT 1); on Citus,
	// where the completion is its write (SELECT 1) and then its events
	// with COMMIT, the COMMIT that follows the write.
	lost := "SELECT 1"
	if testdb.Citus() {
		lost = "COMMIT"
	}
	rig.proxy, err = pgproxy.Start(addr, pgproxy.Options{Inspect: true, Observe: func(m pgproxy.Message) {
		// The first command that returns one row, a SUCCEEDED job, once
		// the handler returned: the completion (a heartbeat round's row
		// is LEASED). The network goes down as its committing reply is
		// swallowed, once.
		if m.Type == 'D' && rig.armed.Load() && bytes.Contains(m.Body, []byte("SUCCEEDED")) {
			succeededRow.Store(true)
		}
		if m.Tag() == "SELECT 1" && succeededRow.Load() && rig.armed.CompareAndSwap(true, false) {
			if lost == "SELECT 1" {
				goDown()
				return
			}
			rig.proxy.DropReply(lost)
			commitArmed.Store(true)
		}
		if m.Tag() == "COMMIT" && commitArmed.CompareAndSwap(true, false) {
			goDown()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rig.proxy.Close)
	cfg, err := pgxpool.ParseConfig(rig.proxy.ConnString(e.url))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
		if rig.down.Load() {
			rig.refused.Add(1)
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
	rig.w = startWorker(t, pool, worker.Config{WorkerID: "lost-reply", Lease: leaseFor,
		PollInterval: time.Hour, DisableListen: true, RecoveryInterval: -1},
		func(w *worker.Worker) error {
			return worker.Register(w, typeBlock, func(ctx context.Context, _ worker.Job[json.RawMessage]) (any, error) {
				close(started)
				<-rig.release
				return map[string]string{"by": "lost-reply"}, nil
			})
		})
	<-started
	// The fetcher claims again at once after finding work: that claim
	// answers SELECT 0, which the proxy lets through.
	if lost == "SELECT 1" {
		rig.proxy.DropReply(lost)
	}
	return rig, j
}

// complete lets the handler return and waits until its completion landed
// and the network went down.
func (rig *lostReplyRig) complete(j runledger.Job) {
	rig.armed.Store(true)
	close(rig.release)
	rig.e.waitFor("the completion to land", func() bool {
		return countWhere(rig.e.t, rig.e.admin, `id = $1 AND status = 'SUCCEEDED'`, j.ID) == 1
	})
	rig.e.waitFor("the network to go down", rig.down.Load)
}

// wantSucceededOnce checks, once the network is back, that the job
// SUCCEEDED once, by the worker's one write, and that the worker
// reported it succeeded, exactly once.
func (rig *lostReplyRig) wantSucceededOnce(j runledger.Job) {
	t := rig.e.t
	t.Helper()
	f := rig.w.waitFinished("the job's outcome", func(f worker.Finished) bool { return f.Job.ID == j.ID })
	if rig.proxy.Dropped() != 1 {
		t.Fatalf("the proxy swallowed %d replies, want 1", rig.proxy.Dropped())
	}
	if got, want := history(t, rig.e.admin, j.ID), "ENQUEUED LEASED@1 SUCCEEDED@1"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if f.Outcome != worker.OutcomeSucceeded || f.Job.Status != "SUCCEEDED" {
		t.Errorf("the worker reported %s (%v) for a completion it wrote, want succeeded", f.Outcome, f.Err)
	}
	if n := len(rig.w.outcomes()); n != 1 {
		t.Errorf("the worker reported %d outcomes, want 1: %+v", n, rig.w.outcomes())
	}
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
	rig, j := newLostReplyRig(t, 30*time.Second)
	rig.complete(j)
	rig.e.waitFor("the worker to retry against the down network twice", func() bool { return rig.refused.Load() >= 2 })
	rig.down.Store(false)
	rig.wantSucceededOnce(j)
}

// TestWorkerCompletionWithALostReplyOutlastsItsLease loses the reply to a
// worker's completion and keeps the network down for six leases of one
// second: past the lease's end, when nothing more may be written for the
// attempt, and well past the one lease more (after the write's retries
// and their backoff) that the worker once kept reading the job back
// before it reported the attempt lost, as a slow server restart made it
// do in the soak. The worker must keep reading until the database
// answers: no outcome while the network is down, then succeeded, once.
// The outage is measured in time because the lease is: nothing the
// worker does shows that it has outlasted it.
func TestWorkerCompletionWithALostReplyOutlastsItsLease(t *testing.T) {
	t.Parallel()
	const leaseFor = time.Second
	rig, j := newLostReplyRig(t, leaseFor)
	rig.complete(j)
	rig.e.waitFor("six leases to pass with the network down", func() bool {
		return time.Since(time.Unix(0, rig.downAt.Load())) > 6*leaseFor
	})
	if got := rig.w.outcomes(); len(got) != 0 {
		t.Fatalf("the worker reported %s (%v) while it could not read the job back, want nothing yet", got[0].Outcome, got[0].Err)
	}
	rig.down.Store(false)
	rig.wantSucceededOnce(j)
}
