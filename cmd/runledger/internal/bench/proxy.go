package bench

import (
	"io"
	"net"
	"sync"
	"time"
)

// delayProxy is a loopback TCP proxy that holds every chunk the client
// sends for a fixed delay before passing it on, adding that delay to each
// round trip, so the cost of round trips on a real network shows on one
// machine. Replies pass through at once. Chunks keep their order and are
// delayed independently: a batch written in one go is delayed once.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu    sync.Mutex
	conns map[net.Conn]bool
	done  bool
	held  time.Duration // total time chunks were held (since reset)
	count int64
	// sleep is what the proxy asks time.Sleep for to hold a chunk for
	// delay: timers overshoot (by a tenth of a millisecond or more on a
	// virtual machine), so it is calibrated at start.
	sleep time.Duration
}

// reset clears the held-time statistics.
func (p *delayProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held, p.count = 0, 0
}

// meanHeld returns how long a chunk was actually held on average since the
// last reset: the configured delay plus the timer's overshoot.
func (p *delayProxy) meanHeld() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count == 0 {
		return 0
	}
	return p.held / time.Duration(p.count)
}

// startDelayProxy listens on a free loopback port and forwards to target
// (host:port).
func startDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]bool{}, sleep: calibrateSleep(delay)}
	go p.serve()
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening and closes every proxied connection.
func (p *delayProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *delayProxy) track(cs ...net.Conn) bool {
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

func (p *delayProxy) serve() {
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
		go p.delayed(client, server)
		go func() {
			_, _ = io.Copy(client, server)
			_ = client.Close()
		}()
	}
}

type chunk struct {
	data    []byte
	arrived time.Time
}

// delayed copies src to dst, each chunk p.delay after it arrived.
func (p *delayProxy) delayed(src, dst net.Conn) {
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
		if p.delay > 0 {
			// Sleep the calibrated time, less what the chunk already
			// waited in the queue.
			if wait := p.sleep - time.Since(c.arrived); wait > 0 {
				time.Sleep(wait)
			}
		}
		held := time.Since(c.arrived)
		if _, err := dst.Write(c.data); err != nil {
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
