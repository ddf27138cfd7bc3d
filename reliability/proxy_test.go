package reliability_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cutProxy forwards TCP connections to a PostgreSQL server and can lose a
// reply on purpose. Armed with a command tag, it reads the server's
// messages; at the first CommandComplete whose tag starts with that text it
// stops forwarding, waits for the ReadyForQuery that follows (by then the
// command has committed, an implicit transaction included: PostgreSQL
// commits at Sync, before ReadyForQuery), and closes both connections. The
// client never hears that its command succeeded: the case of a COMMIT that
// landed while the connection died, which pg_terminate_backend cannot
// produce on purpose.
type cutProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	armed string
	cuts  int
	conns map[net.Conn]bool
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// arm makes the proxy swallow the reply to the next command whose
// CommandComplete tag starts with tag ("COMMIT", "SELECT 1", ...).
func (p *cutProxy) arm(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = tag
}

// cutCount reports how many replies the proxy has swallowed.
func (p *cutProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = true
}

func (p *cutProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		go func() {
			_, _ = io.Copy(server, client)
			_ = server.Close()
		}()
		go p.relayServer(server, client)
	}
}

// relayServer copies the server's messages to the client one by one
// (every server message is a type byte and a length), watching for the
// armed tag.
func (p *cutProxy) relayServer(server, client net.Conn) {
	defer client.Close()
	defer server.Close()
	header := make([]byte, 5)
	withholding := false
	for {
		if _, err := io.ReadFull(server, header); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(header[1:])) - 4
		if n < 0 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(server, body); err != nil {
			return
		}
		switch header[0] {
		case 'C': // CommandComplete: the tag, NUL-terminated
			tag := strings.TrimRight(string(body), "\x00")
			p.mu.Lock()
			if p.armed != "" && strings.HasPrefix(tag, p.armed) {
				p.armed = ""
				withholding = true
			}
			p.mu.Unlock()
		case 'Z': // ReadyForQuery
			if withholding {
				p.mu.Lock()
				p.cuts++
				p.mu.Unlock()
				return // closes both sides without a word to the client
			}
		}
		if withholding {
			continue
		}
		if _, err := client.Write(append(header[:5:5], body...)); err != nil {
			return
		}
	}
}

// openPoolVia opens a one-connection pool on url that connects through
// the proxy.
func openPoolVia(t testing.TB, url, app string, p *cutProxy) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host = host
	cfg.ConnConfig.Port = uint16(n)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// serverAddr returns host:port of the server a connection string names.
func serverAddr(t testing.TB, url string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.Host == "" || strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		t.Fatal(errors.New("the lost-reply proxy needs a TCP server address, not a unix socket"))
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}
