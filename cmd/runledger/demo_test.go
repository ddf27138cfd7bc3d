package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runledger-go/runledger/internal/pgserver"
	"github.com/runledger-go/runledger/internal/testdb"
)

// demoTitles are the steps the demo must print, in order, on a throwaway
// server.
var demoTitles = []string{
	"Start a throwaway PostgreSQL server",
	"Migrate the schema",
	"Define a job type",
	"Start a worker (package worker) that runs the invoice jobs",
	"Enqueue a job for tenant A",
	"The worker runs it",
	"Replay the succeeded job (compare-and-replay)",
	"The same worker runs the replay",
	"Retry the same replay (idempotent: the same job back)",
	"Reuse the key with another reason (conflict)",
	"Replay with a stale run number (expectation mismatch)",
	"Tenant B tries to replay tenant A's job (not found)",
	"The lineage, as 'runledger jobs show' shows it",
	"Bulk-replay every succeeded job of the type (one action, by filter)",
	"Run the same bulk action again (idempotent: all existing)",
	"A charge capture dead-letters while the payment provider is down",
	"The provider is back: requeue the dead-lettered job (compare-and-requeue)",
	"Retry the same requeue (idempotent: existing, nothing written)",
	"The worker runs the requeued job; 'jobs show' lists the requeue",
	"Stop the worker (graceful shutdown)",
	"Stop the throwaway server",
}

// demoTmp returns a private TMPDIR for one demo run, so that the server
// dirs it creates (runledger-pgtemp-*) can be compared before and after
// without seeing other tests' servers. The postgres user must reach it.
func demoTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "runledger-cli-demo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serverDirs lists the throwaway servers' dirs in tmp.
func serverDirs(t *testing.T, tmp string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(tmp, "runledger-pgtemp-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// processesUsing returns the command lines of running processes that
// mention dir (a postgres started with -D dir/...).
func processesUsing(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmdline, dir+"/") {
			out = append(out, cmdline)
		}
	}
	return out
}

// wantNoServerLeft fails if the demo left a server dir or process behind.
func wantNoServerLeft(t *testing.T, tmp string) {
	t.Helper()
	if dirs := serverDirs(t, tmp); len(dirs) != 0 {
		t.Errorf("server dirs left behind: %v", dirs)
	}
	// A postgres killed a moment ago may still be exiting.
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs := processesUsing(tmp)
		if len(procs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left behind: %v", procs)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testDemo(t *testing.T, c *cli) {
	tmp := demoTmp(t)
	if before := serverDirs(t, tmp); len(before) != 0 {
		t.Fatalf("server dirs before: %v", before)
	}
	out := c.ok(t, env{tmpDir: tmp}, "demo")
	pos := 0
	for i, title := range demoTitles {
		line := fmt.Sprintf("\n%2d. %s\n", i+1, title)
		j := strings.Index(out.stdout[pos:], line)
		if j < 0 {
			t.Fatalf("step %q missing or out of order in:\n%s", strings.TrimSpace(line), out.stdout)
		}
		pos += j
	}
	for _, want := range []string{
		"Started PostgreSQL from ", "$ runledger migrate up", "$ runledger replay --job ",
		"Replayed (inserted)", "Replayed (existing)", "job.replay_idempotency_conflict", "(exit 5)",
		"Expectation mismatch", "(exit 3)", "Not found", "(exit 4)", "Replays made from this job (1):",
		"Stopped the server and removed " + tmp + "/runledger-pgtemp-", "$ runledger replay-bulk --type ", "5 sources selected", "All 5 sources are replayed: 5 inserted now",
		"All 5 sources are replayed: 0 inserted now, 5 already replayed under this key", "The worker ran job ", "SUCCEEDED at run 1 with output {\"sent\":true,\"invoice\":1042}",
		"0 left LEASED", "Demo complete: all 21 steps behaved as described.",
		"$ runledger requeue --job ", "Requeued (inserted)", "is PENDING again at run 2", "Requeued (existing)",
		"DEAD_LETTERED at run 1 (last error provider.down)", "SUCCEEDED with output {\"charge\":\"ch_1042\",\"captured\":true}",
		"Requeue history (1):",
	} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(out.stdout, "FAILED") || out.stderr != "" {
		t.Errorf("demo reported a failure:\n%s\nstderr: %s", out.stdout, out.stderr)
	}
	wantNoServerLeft(t, tmp)
}

func testDemoJSON(t *testing.T, c *cli) {
	tmp := demoTmp(t)
	out := c.ok(t, env{tmpDir: tmp}, "demo", "--json")
	res := object(t, out.stdout)
	wantKeys(t, "demo", res, "database", "steps", "ok")
	if string(res["ok"]) != "true" || str(t, res, "database") != "local" {
		t.Fatalf("demo = %s", out.stdout)
	}
	steps := list(t, res, "steps")
	if len(steps) != len(demoTitles) {
		t.Fatalf("%d steps, want %d", len(steps), len(demoTitles))
	}
	for i, s := range steps {
		if str(t, s, "title") != demoTitles[i] || string(s["ok"]) != "true" || str(t, s, "detail") == "" || str(t, s, "name") == "" {
			t.Errorf("step %d = %v", i, s)
		}
	}
	wantNoServerLeft(t, tmp)
}

func testDemoWithDatabaseURL(t *testing.T, c *cli) {
	tmp := demoTmp(t)
	e := env{databaseURL: emptyDB(t), tmpDir: tmp}
	first := c.ok(t, e, "demo")
	for _, want := range []string{"Use the configured database", "Using the database from DATABASE_URL", "migrations; the database is at version", "Demo complete"} {
		if !strings.Contains(first.stdout, want) {
			t.Errorf("first run lacks %q:\n%s", want, first.stdout)
		}
	}
	for _, unwanted := range []string{"Started PostgreSQL", "starting a throwaway", "Stop the throwaway server"} {
		if strings.Contains(first.stdout, unwanted) {
			t.Errorf("demo on a configured database says %q", unwanted)
		}
	}
	// It can run again on the same database: its data is unique per run.
	second := c.ok(t, e, "demo", "--json")
	res := object(t, second.stdout)
	if string(res["ok"]) != "true" || str(t, res, "database") != "configured" {
		t.Fatalf("second run: %s", second.stdout)
	}
	if d := str(t, list(t, res, "steps")[1], "detail"); !strings.Contains(d, "already at version") {
		t.Errorf("second run migrate step: %q", d)
	}
	// --database-url says so too.
	third := c.ok(t, env{tmpDir: tmp}, "demo", "--database-url", e.databaseURL)
	if !strings.Contains(third.stdout, "Using the database from --database-url") {
		t.Errorf("--database-url run:\n%s", third.stdout)
	}
	if dirs := serverDirs(t, tmp); len(dirs) != 0 {
		t.Errorf("a server was started: %v", dirs)
	}
}

// startDemo starts the demo and returns it with a channel of its stdout
// lines (closed at EOF).
func startDemo(t *testing.T, c *cli, tmp string, args ...string) (*os.Process, func() (int, string, string), <-chan string) {
	t.Helper()
	cmd := c.command(t, env{tmpDir: tmp}, append([]string{"demo"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	// wait returns the exit code, stderr and the stdout lines not yet read.
	wait := func() (int, string, string) {
		var rest strings.Builder
		for l := range lines {
			rest.WriteString(l + "\n")
		}
		err := cmd.Wait()
		if ee, ok := err.(interface{ ExitCode() int }); ok && err != nil {
			return ee.ExitCode(), stderr.String(), rest.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, stderr.String(), rest.String()
	}
	return cmd.Process, wait, lines
}

// waitLine reads lines until one contains s.
func waitLine(t *testing.T, lines <-chan string, s string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo ended before printing %q", s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no line with %q", s)
		}
	}
}

// testDemoInterrupted: Ctrl-C while the server is starting stops it,
// removes its dir and exits non-zero.
func testDemoInterrupted(t *testing.T, c *cli) {
	tmp := demoTmp(t)
	proc, wait, lines := startDemo(t, c, tmp)
	waitLine(t, lines, "starting a throwaway PostgreSQL server")
	if err := proc.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code, stderr, _ := wait()
	if code == 0 {
		t.Fatalf("interrupted demo exited 0")
	}
	if !strings.Contains(stderr, "interrupted") {
		t.Errorf("stderr = %q, want it to say interrupted", stderr)
	}
	wantNoServerLeft(t, tmp)
}

// testDemoInterruptedMidStory: Ctrl-C while the story runs (held at a
// step by --pace) stops the server, removes its dir and exits non-zero.
func testDemoInterruptedMidStory(t *testing.T, c *cli) {
	tmp := demoTmp(t)
	proc, wait, lines := startDemo(t, c, tmp, "--pace", "10m")
	waitLine(t, lines, "migrations; the database is at version")
	if len(serverDirs(t, tmp)) != 1 {
		t.Fatalf("server dirs while the story runs: %v", serverDirs(t, tmp))
	}
	if err := proc.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code, stderr, rest := wait()
	if code != 1 || !strings.Contains(stderr, "interrupted") {
		t.Fatalf("exit %d, stderr %q; want 1 and interrupted", code, stderr)
	}
	if !strings.Contains(rest, "Stop the throwaway server") || strings.Contains(rest, "Define a job type") || strings.Contains(rest, "FAILED") {
		t.Errorf("after the interrupt the demo printed:\n%s", rest)
	}
	wantNoServerLeft(t, tmp)
}

// testDemoKeep: with --keep the server outlives the story until a signal,
// then is stopped and removed.
func testDemoKeep(t *testing.T, c *cli) {
	tmp := demoTmp(t)
	proc, wait, lines := startDemo(t, c, tmp, "--keep")
	waitLine(t, lines, "Press Ctrl-C to stop it.")
	if len(serverDirs(t, tmp)) != 1 || len(processesUsing(tmp)) == 0 {
		t.Fatalf("no server running while kept: dirs %v", serverDirs(t, tmp))
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, stderr, _ := wait(); code != 0 {
		t.Fatalf("kept demo exited %d after SIGTERM: %s", code, stderr)
	}
	wantNoServerLeft(t, tmp)
}

// testDemoWithoutPostgreSQL: with no server binaries, no Docker and no
// database URL, the demo exits 1 saying what to install. The binaries are
// hidden in a private mount namespace, which needs root and unshare(1).
func testDemoWithoutPostgreSQL(t *testing.T, c *cli) {
	unshare, err := exec.LookPath("unshare")
	if os.Geteuid() != 0 || err != nil {
		t.Skip("hiding the PostgreSQL binaries needs root and unshare(1)")
	}
	empty := t.TempDir()
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, glob := range []string{"/usr/lib/postgresql", "/usr/pgsql-*"} {
		dirs, _ := filepath.Glob(glob)
		for _, d := range dirs {
			fmt.Fprintf(&script, "mount --bind %s %s\n", empty, d)
		}
	}
	fmt.Fprintf(&script, "exec %s demo\n", c.bin)
	cmd := c.command(t, env{tmpDir: demoTmp(t)}, "unused")
	cmd.Path = unshare
	cmd.Args = []string{"unshare", "-m", "sh", "-c", script.String()}
	// A PATH without initdb and no binaries named. The command never
	// looks for Docker (it links no Docker client), so a daemon that
	// answers would change nothing.
	cmd.Env = append(cmd.Env, "PATH=/usr/bin:/bin", pgserver.EnvBinDir+"=")
	if p, err := exec.LookPath("initdb"); err == nil && strings.HasPrefix(p, "/usr/bin") {
		t.Skip("initdb is in /usr/bin")
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	wantOneLine(t, stderr.String())
	for _, want := range []string{"no PostgreSQL to run on", "apt-get install postgresql", "RUNLEDGER_PG_BINDIR", "DATABASE_URL"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("message lacks %q: %s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "Docker") {
		t.Errorf("message offers Docker, which the command never uses: %s", stderr.String())
	}
}

// testDemoStepFails: a step that does not behave as the story says (here
// the database refuses the demo's job type) fails the demo: exit 1, the
// step marked FAILED, the later steps not run, ok false under --json.
func testDemoStepFails(t *testing.T, c *cli) {
	url := testdb.NewURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `ALTER TABLE job_definitions ADD CONSTRAINT no_demo_types CHECK (job_type NOT LIKE 'demo.%')`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := env{databaseURL: url}
	out := c.want(t, 1, e, "demo")
	if !strings.Contains(out.stdout, "3. Define a job type") || !strings.Contains(out.stdout, "FAILED") ||
		strings.Contains(out.stdout, "Enqueue a job") || strings.Contains(out.stdout, "Demo complete") {
		t.Errorf("stdout:\n%s", out.stdout)
	}
	if !strings.Contains(out.stdout, "Demo FAILED at step \"Define a job type\"") {
		t.Errorf("no failure summary:\n%s", out.stdout)
	}
	wantOneLine(t, out.stderr)
	if !strings.Contains(out.stderr, "Define a job type") || !strings.Contains(out.stderr, "db.business_rule_violation") {
		t.Errorf("stderr: %s", out.stderr)
	}
	res := object(t, c.want(t, 1, e, "demo", "--json").stdout)
	steps := list(t, res, "steps")
	if string(res["ok"]) != "false" || len(steps) != 3 || string(steps[2]["ok"]) != "false" {
		t.Errorf("--json: %v", res)
	}
}
