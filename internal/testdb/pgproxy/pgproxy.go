// Package pgproxy is a loopback TCP proxy between PostgreSQL clients and a
// server, for tests and the benchmark runner. It can do two things to the
// traffic it forwards:
//
//   - Delay: hold every chunk a client sends for a fixed time before
//     passing it on, which adds that time to each round trip, so the cost
//     of round trips on a real network shows on one machine. Replies pass
//     through at once. Chunks keep their order and are delayed
//     independently: a batch written in one go is delayed once.
//   - Faults (with Options.Inspect): read the server's replies message by
//     message, show each to Options.Observe, and, once armed with
//     DropReply, swallow the reply to a command and close the connection:
//     the client never hears that its command ran. This is the case of a
//     COMMIT that landed while the connection died, which
//     pg_terminate_backend cannot produce on purpose.
//   - Stall: black-hole the server's host. From Stall on, nothing more is
//     forwarded either way on any connection, and new connections (cancel
//     requests among them) are accepted and never answered, as when the
//     server's host stops answering in a failover.
//
// Inspecting needs the protocol in clear (sslmode disable or prefer against
// a server without TLS); a connection on which the server accepts TLS is
// forwarded without inspection.
package pgproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure a Proxy.
type Options struct {
	// Delay is how long each chunk a client sends is held before it is
	// passed on; 0 passes chunks on at once.
	Delay time.Duration
	// Inspect makes the proxy read the server's replies message by message,
	// which DropReply and Observe need. Without it replies are copied as
	// bytes.
	Inspect bool
	// Observe, if set (it implies Inspect), is called with every message
	// the server sends, on the connection's relay goroutine, before the
	// message is forwarded or withheld. It must not block.
	Observe func(Message)
}

// Message is one message of the server's side of the protocol.
type Message struct {
	Type byte   // 'C' CommandComplete, 'E' ErrorResponse, 'Z' ReadyForQuery, ...
	Body []byte // the message after its type and length
}

// Tag returns a CommandComplete's command tag ("INSERT 0 1", "COMMIT"), or
// "" for another message.
func (m Message) Tag() string {
	if m.Type != 'C' {
		return ""
	}
	return strings.TrimRight(string(m.Body), "\x00")
}

// SQLState returns an ErrorResponse's or NoticeResponse's SQLSTATE field,
// or "" for another message.
func (m Message) SQLState() string {
	if m.Type != 'E' && m.Type != 'N' {
		return ""
	}
	for b := m.Body; len(b) > 1; {
		field := b[0]
		end := strings.IndexByte(string(b[1:]), 0)
		if end < 0 {
			return ""
		}
		if field == 'C' {
			return string(b[1 : 1+end])
		}
		b = b[2+end:]
	}
	return ""
}

// Proxy forwards connections from a loopback port to a server.
type Proxy struct {
	ln     net.Listener
	target string
	opts   Options
	// sleep is what the proxy asks time.Sleep for to hold a chunk for
	// Delay: timers overshoot (by a tenth of a millisecond or more on a
	// virtual machine), so it is calibrated at start.
	sleep time.Duration

	mu      sync.Mutex
	conns   map[net.Conn]bool
	done    bool
	held    time.Duration // total time chunks were held (since ResetHeld)
	count   int64
	armed   string
	dropped int
	stalled bool
}

// Start listens on a free loopback port and forwards every connection
// made to it to target (host:port).
func Start(target string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if opts.Observe != nil {
		opts.Inspect = true
	}
	p := &Proxy{ln: ln, target: target, opts: opts, conns: map[net.Conn]bool{}, sleep: calibrateSleep(opts.Delay)}
	go p.serve()
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening and closes every proxied connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// ResetHeld clears the held-time statistics.
func (p *Proxy) ResetHeld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held, p.count = 0, 0
}

// MeanHeld returns how long a client's chunk was actually held on average
// since the last ResetHeld: the configured delay plus the timer's
// overshoot and the proxy's own hop.
func (p *Proxy) MeanHeld() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count == 0 {
		return 0
	}
	return p.held / time.Duration(p.count)
}

// DropReply arms the proxy (started with Inspect) to swallow the reply to
// the next command whose CommandComplete tag starts with tag ("COMMIT",
// "SELECT", ...), on whichever connection it comes: from that
// CommandComplete on nothing more reaches the client, and at the
// ReadyForQuery that follows (by then the command has committed, an
// implicit transaction included: PostgreSQL commits before it reports
// ReadyForQuery) the proxy closes both sides of the connection.
func (p *Proxy) DropReply(tag string) {
	if !p.opts.Inspect {
		panic("pgproxy: DropReply needs a proxy started with Options.Inspect")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = tag
}

// Dropped reports how many replies the proxy has swallowed.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Stall black-holes the server from now on (see the package
// documentation); Close still closes everything.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

func (p *Proxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// stallWriter writes to w until the proxy stalls, then swallows
// everything.
type stallWriter struct {
	p *Proxy
	w io.Writer
}

func (sw stallWriter) Write(b []byte) (int, error) {
	if sw.p.isStalled() {
		return len(b), nil
	}
	return sw.w.Write(b)
}

// track registers connections for Close; false once the proxy is closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.isStalled() {
			// Accepted by the kernel, never answered.
			if !p.track(client) {
				_ = client.Close()
				return
			}
			go func() { _, _ = io.Copy(io.Discard, client) }()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client, server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		for _, c := range []net.Conn{client, server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
		}
		go p.requests(client, server)
		go p.replies(server, client)
	}
}

type chunk struct {
	data    []byte
	arrived time.Time
}

// requests copies what the client sends to the server, each chunk Delay
// after it arrived.
func (p *Proxy) requests(src, dst net.Conn) {
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{data: append([]byte(nil), buf[:n]...), arrived: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if p.opts.Delay > 0 {
			// Sleep the calibrated time, less what the chunk already
			// waited in the queue.
			if wait := p.sleep - time.Since(c.arrived); wait > 0 {
				time.Sleep(wait)
			}
		}
		held := time.Since(c.arrived)
		if _, err := (stallWriter{p, dst}).Write(c.data); err != nil {
			break
		}
		p.mu.Lock()
		p.held += held
		p.count++
		p.mu.Unlock()
	}
	_ = dst.Close()
	for range queue { //nolint:revive // drain so the reader ends
	}
}

// replies copies what the server sends to the client: as bytes, or, with
// Inspect, message by message (every server message is a type byte and a
// length), writing at once all the messages one read brought.
func (p *Proxy) replies(server, client net.Conn) {
	defer client.Close()
	defer server.Close()
	if !p.opts.Inspect {
		_, _ = io.Copy(stallWriter{p, client}, server)
		return
	}
	clientW := stallWriter{p, client}
	r := bufio.NewReaderSize(server, 64<<10)
	// The answer to an SSLRequest is one byte: 'N' (go on in clear), or
	// 'S' (TLS follows, which cannot be inspected).
	switch first, err := r.Peek(1); {
	case err != nil:
		return
	case first[0] == 'S':
		_, _ = io.Copy(client, r)
		return
	case first[0] == 'N':
		_, _ = r.Discard(1)
		if _, err := clientW.Write([]byte{'N'}); err != nil {
			return
		}
	}
	var out []byte
	header := make([]byte, 5)
	withholding := false
	for {
		if _, err := io.ReadFull(r, header); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(header[1:])) - 4
		if n < 0 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		m := Message{Type: header[0], Body: body}
		if p.opts.Observe != nil {
			p.opts.Observe(m)
		}
		switch m.Type {
		case 'C':
			p.mu.Lock()
			hit := p.armed != "" && strings.HasPrefix(m.Tag(), p.armed)
			if hit {
				p.armed = ""
			}
			p.mu.Unlock()
			if hit {
				// What came before the command's reply still goes through.
				if _, err := clientW.Write(out); err != nil {
					return
				}
				out = out[:0]
				withholding = true
			}
		case 'Z':
			if withholding {
				p.mu.Lock()
				p.dropped++
				p.mu.Unlock()
				return // closes both sides without a word to the client
			}
		}
		if withholding {
			continue
		}
		out = append(append(out, header...), body...)
		if r.Buffered() == 0 { // the next read would wait: forward what came
			if _, err := clientW.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}
}

// TargetAddr returns the host:port of the server a connection string (URL
// or keyword/value) names, which must be a TCP address.
func TargetAddr(connString string) (string, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return "", err
	}
	if cfg.Host == "" || strings.HasPrefix(cfg.Host, "/") {
		return "", errors.New("pgproxy: the proxy needs a TCP database address, not a unix socket")
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// ConnString returns connString pointed at the proxy instead of its server.
func (p *Proxy) ConnString(connString string) string {
	addr := p.Addr()
	u, err := url.Parse(connString)
	if err != nil || u.Scheme == "" {
		host, port, _ := net.SplitHostPort(addr)
		return connString + " host=" + host + " port=" + port
	}
	u.Host = addr
	return u.String()
}

// calibrateSleep returns the duration to pass to time.Sleep so that the
// median actual sleep is d, adjusting over a few rounds of measurements.
func calibrateSleep(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	s := d
	for round := 0; round < 6; round++ {
		samples := make([]time.Duration, 25)
		for i := range samples {
			t0 := time.Now()
			time.Sleep(s)
			samples[i] = time.Since(t0)
		}
		sortDurations(samples)
		s += d - samples[len(samples)/2]
		if s < d/10 {
			s = d / 10
		}
	}
	return s
}

func sortDurations(ds []time.Duration) {
	for i := 1; i < len(ds); i++ {
		for j := i; j > 0 && ds[j] < ds[j-1]; j-- {
			ds[j], ds[j-1] = ds[j-1], ds[j]
		}
	}
}
