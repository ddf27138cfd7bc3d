// Package pgserver runs a throwaway local PostgreSQL server: the one the
// demo and the console start on a fresh machine, and the one the test kit
// (internal/testdb) builds on. It is product code and imports no test
// tooling.
//
// Start runs initdb into a fresh temp dir, starts postgres on a free loopback
// port as a direct child process, and waits until it accepts connections;
// Stop shuts it down and removes the dir. The server's superuser is
// "postgres", authenticated by trust, reachable only on 127.0.0.1 and a unix
// socket inside the temp dir.
//
// Nothing outlives the calling process for long, even when it never calls
// Stop: the server runs with a parent-death signal (SIGQUIT, PostgreSQL's
// immediate shutdown), so a test binary that panics, times out or is killed
// takes its server with it. The temp dir such a run leaves behind is removed
// by the next Start on the machine, once no process of that run remains.
//
// The binaries are the machine's own (initdb on PATH, or the newest
// /usr/lib/postgresql/*/bin or /usr/pgsql-*/bin) unless Options.BinDir or the
// environment variable RUNLEDGER_PG_BINDIR names a directory; tools/pgbin
// fetches one for each major from 13 to 18, whose lib/ (beside bin/) holds
// the shared libraries those builds need and is put on LD_LIBRARY_PATH.
//
// When the caller is root, initdb and postgres run as the "postgres" OS user
// (they refuse to run as root); the temp dir and the binaries must then be
// reachable by that user, which the default /tmp and tools/pgbin's cache are.
//
// Only Linux is supported (parent-death signals are Linux-only).
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Timeouts for waiting on the server.
const (
	// readyTimeout bounds how long Start and Restart wait for the server
	// to accept connections (crash recovery after an immediate shutdown
	// is part of that wait).
	readyTimeout = 30 * time.Second
	// stopGrace is how long Stop and Restart wait after the shutdown
	// signal before escalating to SIGQUIT and then SIGKILL.
	stopGrace = 10 * time.Second
	// portAttempts is how many free ports Start tries: another process can
	// take the port between our probe and the server's bind.
	portAttempts = 5
)

// managedSettings are set by pgserver itself and may not appear in
// Options.Settings, because URL and Port would then be wrong.
var managedSettings = []string{"port", "listen_addresses", "unix_socket_directories", "data_directory"}

// fastSettings trade durability for speed; used unless Options.Durable. Data
// survives a server restart (even an immediate one, except for the last few
// hundred milliseconds of commits) but not an operating-system crash.
var fastSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
}

// errPortBusy marks a start that failed because the port was taken.
var errPortBusy = errors.New("port already in use")

// Options configures Start. The zero value is a fast, non-durable server
// using the binaries found on the machine.
type Options struct {
	// Durable keeps PostgreSQL's default durability settings. When false
	// (the default), the server runs with fsync=off,
	// synchronous_commit=off and full_page_writes=off: much faster, and
	// safe for throwaway data. Benchmarks that claim durability numbers
	// and crash tests that must not lose acknowledged commits set it.
	Durable bool

	// BinDir, if set, is the directory holding initdb and postgres, and
	// the only place looked at. Otherwise Start uses $RUNLEDGER_PG_BINDIR
	// (EnvBinDir) if set, else the directory that initdb on PATH resolves
	// to (following symlinks), else the newest /usr/lib/postgresql/*/bin
	// or /usr/pgsql-*/bin. See FindBinDir.
	BinDir string

	// Settings are extra server settings, passed as -c name=value; they
	// override the fast defaults. port, listen_addresses,
	// unix_socket_directories and data_directory are managed by pgserver and
	// rejected here.
	Settings map[string]string

	// Logf, if set, receives progress and diagnostic lines (timings,
	// escalations, stale dirs removed). Nil discards them.
	Logf func(format string, args ...any)
}

// Server is a running throwaway PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	opts    Options
	logf    func(string, ...any)
	binDir  string
	libDir  string // first on the programs' LD_LIBRARY_PATH, if set
	dir     string
	dataDir string
	sockDir string
	logPath string
	cred    *syscall.Credential
	port    int

	mu      sync.Mutex
	proc    *process // nil while stopped between Restart's halves
	stopped bool
	stopErr error
}

// Start creates and starts a new server and returns once it accepts
// connections. ctx bounds the start only (initdb and the wait for
// readiness, itself capped at 30 seconds); the server then runs until Stop
// or until the calling process exits.
//
// Errors: ErrNoBinaries (wrapped, naming what to install) when no server
// binaries are found; otherwise an error with the initdb output or the tail
// of the server log. On error nothing is left running and the temp dir is
// removed.
//
// Start first removes, best effort, temp dirs of earlier runs that died
// without calling Stop (see the package doc).
func Start(ctx context.Context, opts Options) (*Server, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	for _, name := range managedSettings {
		if _, ok := opts.Settings[name]; ok {
			return nil, fmt.Errorf("pgserver: setting %q is managed by pgserver and cannot be set", name)
		}
	}
	binDir, err := FindBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}

	removeStaleDirs(os.TempDir(), logf)

	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgserver: create temp dir: %w", err)
	}
	s := &Server{
		opts:    opts,
		logf:    logf,
		binDir:  binDir,
		libDir:  libDir(binDir),
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "server.log"),
		cred:    cred,
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.Stop()
		}
	}()

	// Written first, so a concurrent stale sweep sees a live owner.
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if err := os.Mkdir(s.sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if cred != nil {
		for _, d := range []string{dir, s.sockDir} {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("pgserver: hand %s to the postgres user: %w", d, err)
			}
		}
	}

	t0 := time.Now()
	if err := s.initdb(ctx); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	t1 := time.Now()
	if err := s.launch(ctx, true); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	logf("pgserver: PostgreSQL from %s on 127.0.0.1:%d in %s (initdb %s, start %s, durable=%v)",
		binDir, s.port, dir, t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond), opts.Durable)
	ok = true
	return s, nil
}

// URL returns a connection URL for database dbname ("postgres" if empty) as
// the superuser postgres over TCP on 127.0.0.1, with sslmode=disable. The
// URL stays valid across Restart (same port).
func (s *Server) URL(dbname string) string {
	if dbname == "" {
		dbname = "postgres"
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int { return s.port }

// BinDir returns the directory the server's initdb and postgres came from.
func (s *Server) BinDir() string { return s.binDir }

// Dir returns the server's temp dir: data/ (the cluster), sock/ (the unix
// socket) and server.log. Stop removes it.
func (s *Server) Dir() string { return s.dir }

// Stop shuts the server down with a fast shutdown (SIGINT: open sessions
// are terminated, a checkpoint is written), escalating to SIGQUIT and then
// SIGKILL if it has not exited after 10 seconds, and removes the temp dir.
// It is idempotent: later calls do nothing and return the first call's
// result.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return s.stopErr
	}
	s.stopped = true
	var errs []error
	if s.proc != nil {
		if err := s.proc.stop(syscall.SIGINT, stopGrace, s.logf); err != nil {
			errs = append(errs, err)
		}
		s.proc = nil
	}
	if err := removeAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		s.stopErr = fmt.Errorf("pgserver: stop: %w", err)
	}
	return s.stopErr
}

// Restart stops the server the way `pg_ctl stop -m mode` would and starts it
// again on the same port and data directory, returning once it accepts
// connections. mode is "fast" (SIGINT: clean shutdown with a checkpoint) or
// "immediate" (SIGQUIT: no checkpoint; the next start runs crash recovery
// from the WAL, as after a power cut that spares the OS page cache).
//
// Every open connection is broken. With Durable false, an immediate restart
// can lose commits from the last few hundred milliseconds
// (synchronous_commit=off); crash tests that count acknowledged commits
// should use Durable. Restart after Stop is an error.
func (s *Server) Restart(ctx context.Context, mode string) error {
	return s.RestartAfter(ctx, mode, 0)
}

// RestartAfter is Restart with the server down for at least down between
// its stop and its start: a slow restart (a failover, a long crash
// recovery), during which every connection attempt is refused.
func (s *Server) RestartAfter(ctx context.Context, mode string, down time.Duration) error {
	var sig syscall.Signal
	switch mode {
	case "fast":
		sig = syscall.SIGINT
	case "immediate":
		sig = syscall.SIGQUIT
	default:
		return fmt.Errorf("pgserver: restart mode %q: want \"fast\" or \"immediate\"", mode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("pgserver: restart: server already stopped")
	}
	if s.proc != nil {
		if err := s.proc.stop(sig, stopGrace, s.logf); err != nil {
			return fmt.Errorf("pgserver: restart: %w", err)
		}
		s.proc = nil
	}
	if down > 0 {
		t := time.NewTimer(down)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgserver: restart: %w", ctx.Err())
		}
	}
	t0 := time.Now()
	if err := s.launch(ctx, false); err != nil {
		return fmt.Errorf("pgserver: restart: %w", err)
	}
	s.logf("pgserver: restarted (%s) on port %d in %s", mode, s.port, time.Since(t0).Round(time.Millisecond))
	return nil
}

// initdb creates the cluster: trust auth, superuser postgres, UTF8 with the
// C locale (locale-independent and fast), no fsync of the new files.
func (s *Server) initdb(ctx context.Context) error {
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(s.binDir, "initdb"),
		"-D", s.dataDir, "-A", "trust", "-U", "postgres",
		"--encoding=UTF8", "--no-locale", "--no-sync")
	cmd.Dir = s.dir // the caller's cwd may be unreadable for postgres
	cmd.Env = childEnv(s.libDir)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	p, err := startProcess(cmd, syscall.SIGKILL)
	if err != nil {
		return fmt.Errorf("start initdb: %w", err)
	}
	if err := p.run(ctx); err != nil {
		hint := ""
		if s.cred != nil {
			hint = fmt.Sprintf(" (initdb runs as the postgres user, which must be able to reach %s; set TMPDIR to /tmp if it cannot)", s.dir)
		}
		return fmt.Errorf("initdb: %w%s\n%s", err, hint, tail(out.Bytes(), 4096))
	}
	return nil
}

// launch starts postgres and waits until it accepts connections. With
// pickPort it probes a free port first and, if another process takes that
// port before the server binds it, tries again with a new one; otherwise it
// reuses s.port (Restart).
func (s *Server) launch(ctx context.Context, pickPort bool) error {
	for attempt := 1; ; attempt++ {
		if pickPort {
			port, err := freePort()
			if err != nil {
				return fmt.Errorf("pick a port: %w", err)
			}
			s.port = port
		}
		err := s.startPostgres(ctx)
		if err == nil {
			return nil
		}
		if !pickPort || !errors.Is(err, errPortBusy) || attempt == portAttempts {
			return err
		}
		s.logf("pgserver: port %d was taken; trying another (%v)", s.port, err)
	}
}

// startPostgres runs one postgres process on s.port and sets s.proc once it
// is ready; on failure the process is gone and the error carries the log.
func (s *Server) startPostgres(ctx context.Context) error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	logStart, _ := logFile.Seek(0, io.SeekEnd) // to show only this run's lines on failure

	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), s.serverArgs()...)
	cmd.Dir = s.dir
	cmd.Env = childEnv(s.libDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	p, err := startProcess(cmd, syscall.SIGQUIT)
	logFile.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}

	if err := s.waitReady(ctx, p); err != nil {
		_ = p.stop(syscall.SIGQUIT, 5*time.Second, s.logf)
		logTail := s.logSince(logStart)
		if !errors.Is(err, errPortBusy) && isBindFailure(logTail) {
			err = fmt.Errorf("%w: %v", errPortBusy, err)
		}
		return fmt.Errorf("postgres on port %d: %w\nserver log (%s):\n%s", s.port, err, s.logPath, logTail)
	}
	s.proc = p
	return nil
}

// serverArgs is the postgres command line: managed settings as flags, then
// the fast defaults and the caller's settings, sorted for a stable order.
func (s *Server) serverArgs() []string {
	settings := map[string]string{}
	if !s.opts.Durable {
		for k, v := range fastSettings {
			settings[k] = v
		}
	}
	for k, v := range s.opts.Settings {
		settings[k] = v
	}
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)

	args := []string{
		"-D", s.dataDir,
		"-p", strconv.Itoa(s.port),
		"-k", s.sockDir,
		"-c", "listen_addresses=127.0.0.1",
	}
	for _, k := range names {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// waitReady polls until the server accepts a connection and proves to be
// ours (by its data directory: if our postgres failed to bind, another
// server may be answering on the port). It gives up when the process exits,
// ctx ends or readyTimeout passes.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(s.URL("postgres"))
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = 2 * time.Second

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var dataDir string
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir)
			_ = conn.Close(ctx)
		}
		if err == nil {
			if filepath.Clean(dataDir) != s.dataDir {
				return fmt.Errorf("%w: another server (data directory %s) answered", errPortBusy, dataDir)
			}
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before accepting connections (%v)", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w (last attempt: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// logSince returns the tail of the server log written after offset off.
func (s *Server) logSince(off int64) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	if off > int64(len(b)) {
		off = 0
	}
	return tail(b[off:], 4096)
}

// isBindFailure reports whether a server log shows that the TCP port was
// taken (the messages are English because childEnv sets LC_ALL=C).
func isBindFailure(log string) bool {
	return strings.Contains(log, "could not bind") ||
		strings.Contains(log, "Address already in use") ||
		strings.Contains(log, "could not create any TCP/IP sockets")
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before postgres binds it; launch retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// removeAll removes dir, retrying for a moment if it fails: after a SIGKILL
// the server's children may still be exiting and writing into it.
func removeAll(dir string) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := os.RemoveAll(dir)
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("remove %s: %w", dir, err)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail returns at most the last n bytes of b, starting at a line boundary.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}
