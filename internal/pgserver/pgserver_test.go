package pgserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// start starts a server for one test and stops it at the end.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func queryString(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(context.Background(), sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// processesIn returns the pids of processes whose working directory is
// inside dir. PostgreSQL's postmaster and every child of it chdir into the
// data directory, so this finds the whole server, including backends that
// have been reparented after the postmaster died.
func processesIn(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil {
			continue // exited, or not ours to inspect
		}
		cwd = strings.TrimSuffix(cwd, " (deleted)")
		if cwd == dir || strings.HasPrefix(cwd, dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoProcessesIn polls until no process runs inside dir.
func waitNoProcessesIn(t *testing.T, dir string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := processesIn(t, dir)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still running in %s after %s: %v", dir, within, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartQueryStop(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	s := start(t, Options{})
	t.Logf("Start took %s", time.Since(t0).Round(time.Millisecond))

	if !strings.HasPrefix(filepath.Base(s.Dir()), dirPrefix) {
		t.Errorf("Dir %s: want prefix %s", s.Dir(), dirPrefix)
	}
	wantURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/app?sslmode=disable", s.Port())
	if got := s.URL("app"); got != wantURL {
		t.Errorf("URL(app) = %s, want %s", got, wantURL)
	}

	conn := connect(t, s.URL(""))
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	app := connect(t, s.URL("app"))
	if got := queryString(t, app, "SELECT current_database() || ' ' || current_user || ' ' || current_setting('server_encoding')"); got != "app postgres UTF8" {
		t.Errorf("got %q", got)
	}
	if got := queryString(t, app, "SELECT current_setting('listen_addresses')"); got != "127.0.0.1" {
		t.Errorf("listen_addresses = %q", got)
	}
	if len(processesIn(t, s.Dir())) == 0 {
		t.Fatal("no server process found running in the temp dir")
	}

	pid := s.proc.cmd.Process.Pid
	t1 := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop took %s", time.Since(t1).Round(time.Millisecond))
	if _, err := os.Stat(s.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temp dir still there after Stop: %v", err)
	}
	if processAlive(pid) {
		t.Errorf("postmaster %d still alive after Stop", pid)
	}
	waitNoProcessesIn(t, s.Dir(), 5*time.Second)
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := s.Restart(context.Background(), "fast"); err == nil {
		t.Error("Restart after Stop succeeded")
	}
}

func TestDurability(t *testing.T) {
	t.Parallel()
	want := map[bool]map[string]string{
		false: {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "work_mem": "8MB"},
		true:  {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "work_mem": "8MB"},
	}
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			t.Parallel()
			s := start(t, Options{Durable: durable, Settings: map[string]string{"work_mem": "8MB"}})
			conn := connect(t, s.URL(""))
			for name, v := range want[durable] {
				if got := queryString(t, conn, "SHOW "+name); got != v {
					t.Errorf("SHOW %s = %q, want %q", name, got, v)
				}
			}
		})
	}
}

func TestSettingsOverrideFastDefaults(t *testing.T) {
	t.Parallel()
	s := start(t, Options{Settings: map[string]string{"fsync": "on"}})
	conn := connect(t, s.URL(""))
	if got := queryString(t, conn, "SHOW fsync"); got != "on" {
		t.Errorf("fsync = %q, want on", got)
	}
	if got := queryString(t, conn, "SHOW synchronous_commit"); got != "off" {
		t.Errorf("synchronous_commit = %q, want off", got)
	}
}

func TestManagedSettingRejected(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{Settings: map[string]string{"port": "5432"}})
	if err == nil || !strings.Contains(err.Error(), `"port"`) {
		t.Fatalf("err = %v, want a complaint about port", err)
	}
}

// TestRestartAfterStaysDown checks that RestartAfter keeps the server down
// for the time asked: a connection attempt made while it is down is
// refused, and the server is back on the same port afterwards.
func TestRestartAfterStaysDown(t *testing.T) {
	t.Parallel()
	s := start(t, Options{})
	ctx := context.Background()
	url := s.URL("")
	const down = time.Second
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- s.RestartAfter(ctx, "fast", down) }()
	refused := false
	for !refused && time.Since(t0) < down {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			refused = true
			break
		}
		_ = c.Close(ctx)
		time.Sleep(20 * time.Millisecond) // polling until the stop takes effect
	}
	if err := <-done; err != nil {
		t.Fatalf("RestartAfter: %v", err)
	}
	if took := time.Since(t0); took < down {
		t.Errorf("RestartAfter returned after %s, want at least the %s down", took, down)
	}
	if !refused {
		t.Error("no connection attempt was refused while the server was down")
	}
	conn := connect(t, url)
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("after RestartAfter: %v", err)
	}
}

// TestRestart checks that both shutdown modes keep committed data and come
// back on the same port. Durable, because an immediate shutdown of a server
// with synchronous_commit=off may lose the last commits (documented).
func TestRestart(t *testing.T) {
	t.Parallel()
	s := start(t, Options{Durable: true})
	ctx := context.Background()
	port := s.Port()
	conn := connect(t, s.URL(""))
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []string{"fast", "immediate"} {
		oldPID := s.proc.cmd.Process.Pid
		t0 := time.Now()
		if err := s.Restart(ctx, mode); err != nil {
			t.Fatalf("Restart(%s): %v", mode, err)
		}
		t.Logf("Restart(%s) took %s", mode, time.Since(t0).Round(time.Millisecond))
		if s.Port() != port {
			t.Errorf("port changed from %d to %d", port, s.Port())
		}
		if processAlive(oldPID) {
			t.Errorf("old postmaster %d still alive", oldPID)
		}
		if err := conn.Ping(ctx); err == nil {
			t.Errorf("Restart(%s): old connection still works", mode)
		}
		conn = connect(t, s.URL(""))
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil {
			t.Fatalf("after Restart(%s): %v", mode, err)
		}
		if n != i+1 {
			t.Errorf("after Restart(%s): %d rows, want %d", mode, n, i+1)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO kept VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Restart(ctx, "smart"); err == nil {
		t.Error("Restart(smart) succeeded; only fast and immediate are supported")
	}
}

func TestStaleDirSweep(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(name, owner string, age time.Duration) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// A pid that certainly belonged to a process that is gone now.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(done.Process.Pid)
	self := strconv.Itoa(os.Getpid())

	deadOwner := mk(dirPrefix+"dead", dead, 0)
	liveOwner := mk(dirPrefix+"live", self, time.Hour)
	deadOwnerLiveServer := mk(dirPrefix+"deadlive", dead, time.Hour)
	if err := os.WriteFile(filepath.Join(deadOwnerLiveServer, "data", "postmaster.pid"), []byte(self+"\n/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noOwnerFresh := mk(dirPrefix+"fresh", "", 0)
	noOwnerOld := mk(dirPrefix+"old", "", 2*orphanAge)
	other := mk("something-else", dead, time.Hour)

	removed := removeStaleDirs(root, t.Logf)
	for _, d := range []string{deadOwner, noOwnerOld} {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: stale, but not removed", filepath.Base(d))
		}
	}
	for _, d := range []string{liveOwner, deadOwnerLiveServer, noOwnerFresh, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: should have been kept: %v", filepath.Base(d), err)
		}
	}
	if len(removed) != 2 {
		t.Errorf("removed %v, want 2 dirs", removed)
	}
}

// TestCrashedParentLeavesNothing starts a server in a child test process,
// kills that process with SIGKILL (no cleanup can run), and checks that the
// server dies with it and that the next sweep removes its temp dir.
func TestCrashedParentLeavesNothing(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "HELPER-DIR "); ok {
			dir = d
			break
		}
	}
	if dir == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper did not report a server (scan: %v)", sc.Err())
	}
	if len(processesIn(t, dir)) == 0 {
		t.Fatalf("no server running in %s", dir)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Pdeathsig: the postmaster gets SIGQUIT and takes its children down.
	waitNoProcessesIn(t, dir, 10*time.Second)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("expected the crashed run's dir to remain until the next sweep: %v", err)
	}
	removed := removeStaleDirs(filepath.Dir(dir), t.Logf)
	if !contains(removed, dir) {
		t.Errorf("sweep removed %v, not %s", removed, dir)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still there after the sweep: %v", dir, err)
	}
}

// TestMain doubles as the crashing parent of TestCrashedParentLeavesNothing.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		serverThenHang()
		return
	}
	os.Exit(m.Run())
}

const helperEnv = "PGTEMP_TEST_CRASH_HELPER"

// serverThenHang starts a server, reports its dir and waits to be killed.
func serverThenHang() {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper: Start: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("HELPER-DIR %s\n", s.Dir())
	select {} // until SIGKILL
}
