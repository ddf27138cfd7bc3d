package pgtemp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
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
	_, err := Start(context.Background(), Options{Settings: map[string]string{"port": "5432"}})
	if err == nil || !strings.Contains(err.Error(), `"port"`) {
		t.Fatalf("err = %v, want a complaint about port", err)
	}
}

func TestNoBinaries(t *testing.T) {
	_, err := Start(context.Background(), Options{BinDir: t.TempDir()})
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("err = %v, want ErrNoBinaries", err)
	}
	for _, want := range []string{"initdb", "postgres", "apt-get install postgresql"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestFindBinDir(t *testing.T) {
	// The machine's own binaries (the test suite needs them anyway).
	dir, err := findBinDir("")
	if err != nil {
		t.Fatalf("findBinDir: %v", err)
	}
	if err := hasServerBinaries(dir); err != nil {
		t.Fatalf("found %s but: %v", dir, err)
	}

	// A PATH entry that symlinks initdb is resolved to the real directory,
	// where postgres lives.
	t.Setenv(EnvBinDir, "")
	link := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "initdb"), filepath.Join(link, "initdb")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", link)
	if got, err := findBinDir(""); err != nil || got != dir {
		t.Errorf("via symlink on PATH: got %q, %v; want %q", got, err, dir)
	}

	// An explicit BinDir is the only place looked at.
	if _, err := findBinDir(link); !errors.Is(err, ErrNoBinaries) {
		t.Errorf("BinDir without postgres: err = %v, want ErrNoBinaries", err)
	}
	if got, err := findBinDir(dir); err != nil || got != dir {
		t.Errorf("BinDir %s: got %q, %v", dir, got, err)
	}

	// RUNLEDGER_PG_BINDIR wins over PATH, and is the only place looked at.
	t.Setenv(EnvBinDir, dir)
	if got, err := findBinDir(""); err != nil || got != dir {
		t.Errorf("%s=%s: got %q, %v", EnvBinDir, dir, got, err)
	}
	t.Setenv(EnvBinDir, link)
	if _, err := findBinDir(""); !errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), EnvBinDir) {
		t.Errorf("%s without postgres: err = %v, want ErrNoBinaries naming the variable", EnvBinDir, err)
	}
	// Options.BinDir wins over the variable.
	if got, err := findBinDir(dir); err != nil || got != dir {
		t.Errorf("BinDir %s with %s set: got %q, %v", dir, EnvBinDir, got, err)
	}
}

// TestLibDir: the lib directory beside bin goes on LD_LIBRARY_PATH only
// when it holds versioned shared libraries, ahead of what was there.
func TestLibDir(t *testing.T) {
	root := t.TempDir()
	bin, lib := filepath.Join(root, "bin"), filepath.Join(root, "lib")
	for _, d := range []string{bin, lib} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Server modules only, like a distribution's lib directory.
	if err := os.WriteFile(filepath.Join(lib, "plpgsql.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := libDir(bin); got != "" {
		t.Errorf("libDir with modules only = %q, want none", got)
	}
	if err := os.WriteFile(filepath.Join(lib, "libicuuc.so.60.2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := libDir(bin); got != lib {
		t.Errorf("libDir = %q, want %q", got, lib)
	}

	t.Setenv("LD_LIBRARY_PATH", "/elsewhere")
	if got := envValue(childEnv(lib), "LD_LIBRARY_PATH"); got != lib+":/elsewhere" {
		t.Errorf("LD_LIBRARY_PATH = %q, want %q", got, lib+":/elsewhere")
	}
	if got := envValue(childEnv(""), "LD_LIBRARY_PATH"); got != "/elsewhere" {
		t.Errorf("without a lib dir LD_LIBRARY_PATH = %q, want it unchanged", got)
	}
}

// envValue returns the last value of name in env ("" if absent).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == name {
			v = val
		}
	}
	return v
}

// TestServerVersionIsTheBinaries: the server runs the postgres that
// FindBinDir names (RUNLEDGER_PG_BINDIR under the version matrix), with its
// shared libraries found.
func TestServerVersionIsTheBinaries(t *testing.T) {
	dir, err := FindBinDir("")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "postgres"), "--version")
	cmd.Env = childEnv(libDir(dir))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --version: %v", filepath.Join(dir, "postgres"), err)
	}
	// "postgres (PostgreSQL) 13.23" or "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		t.Fatalf("unexpected --version output %q", out)
	}
	want := fields[2]

	s := start(t, Options{})
	if s.BinDir() != dir {
		t.Errorf("BinDir() = %q, want %q", s.BinDir(), dir)
	}
	got := queryString(t, connect(t, s.URL("")), "SHOW server_version")
	if got != want && !strings.HasPrefix(got, want+" ") {
		t.Errorf("server_version = %q, want %q (from %s)", got, want, dir)
	}
}

func TestVersionOrder(t *testing.T) {
	cases := []struct {
		in   string
		want []int
	}{
		{"15", []int{15}}, {"9.6", []int{9, 6}}, {"16beta1", []int{16}}, {"x", nil}, {"10.2.1", []int{10, 2, 1}},
	}
	for _, c := range cases {
		if got := parseVersion(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseVersion(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	less := [][2]string{{"9.6", "10"}, {"9", "9.6"}, {"x", "9"}, {"15", "16beta1"}}
	for _, c := range less {
		if !versionLess(parseVersion(c[0]), parseVersion(c[1])) || versionLess(parseVersion(c[1]), parseVersion(c[0])) {
			t.Errorf("want %s < %s", c[0], c[1])
		}
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
