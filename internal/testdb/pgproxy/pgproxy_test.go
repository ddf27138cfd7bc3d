package pgproxy_test

import (
	"sync"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/testdb/pgproxy"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// startProxy returns a proxy in front of a fresh database, and that database's
// connection string.
func startProxy(t *testing.T, opts pgproxy.Options) (*pgproxy.Proxy, string) {
	t.Helper()
	url := testdb.NewURL(t)
	addr, err := pgproxy.TargetAddr(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgproxy.Start(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, url
}

func TestDelayHoldsEveryRequest(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	p, url := startProxy(t, pgproxy.Options{Delay: d})
	c := testdb.Connect(t, p.ConnString(url))
	p.ResetHeld()
	t0 := time.Now()
	for i := 0; i < 3; i++ { // one round trip each
		testdb.Scalar[int](t, c, `SELECT 1`)
	}
	// The sleep is calibrated at start so that its median is d; on a
	// loaded machine the calibration sees a large overshoot and sleeps
	// less, so the bound is half of d: a chunk passed on without its delay
	// still fails.
	if took := time.Since(t0); took < 3*d/2 {
		t.Fatalf("3 round trips took %s, want about %s or more", took, 3*d)
	}
	if held := p.MeanHeld(); held < d/2 {
		t.Fatalf("mean held %s, want about %s or more", held, d)
	}
}

func TestDropReplyRunsTheCommandAndClosesTheConnection(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []pgproxy.Message
	p, url := startProxy(t, pgproxy.Options{Observe: func(m pgproxy.Message) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m)
	}})
	c := testdb.Connect(t, p.ConnString(url))
	if _, err := c.Exec(testdb.Context(t), `SELECT 1/0`); err == nil {
		t.Fatal("1/0 succeeded")
	}
	p.DropReply("CREATE TABLE")
	if _, err := c.Exec(testdb.Context(t), `CREATE TABLE landed (id int)`); err == nil {
		t.Fatal("the client heard of a reply the proxy dropped")
	}
	if p.Dropped() != 1 || !c.IsClosed() {
		t.Fatalf("dropped %d replies, connection closed %v; want 1 and closed", p.Dropped(), c.IsClosed())
	}
	direct := testdb.Connect(t, url)
	if n := testdb.Scalar[int](t, direct, `SELECT count(*) FROM pg_class WHERE relname = 'landed'`); n != 1 {
		t.Fatal("the command whose reply was dropped did not run")
	}
	mu.Lock()
	defer mu.Unlock()
	var state, tag string
	for _, m := range seen {
		if s := m.SQLState(); s != "" {
			state = s
		}
		if m.Tag() != "" {
			tag = m.Tag()
		}
	}
	if state != "22012" || tag != "CREATE TABLE" {
		t.Fatalf("observed SQLSTATE %q and last tag %q, want 22012 and CREATE TABLE", state, tag)
	}
}
