package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The command is tested as users run it: a binary built once, run as a
// subprocess. Every such test is a subtest of TestCLI, which builds the
// binary into its t.TempDir: the directory is removed when the last
// subtest ends. (TestMain cannot clean up: testdb.Main exits the process.)
var cliTests = []struct {
	name string
	fn   func(t *testing.T, c *cli)
}{
	{"Help", testHelp},
	{"UsageErrorsExit2WithoutDatabaseWork", testUsageErrors},
	{"MissingDatabaseURL", testMissingDatabaseURL},
	{"UnreachableDatabase", testUnreachableDatabase},
	{"MigrateOnEmptyDatabase", testMigrate},
	{"DefinitionsUpsert", testDefinitionsUpsert},
	{"Enqueue", testEnqueue},
	{"ClaimCompleteFail", testClaimCompleteFail},
	{"FinishScope", testFinishScope},
	{"Replay", testReplay},
	{"JobsShow", testJobsShow},
	{"Schedules", testSchedules},
	{"ReplayBulkBadInputExits2AndWritesNothing", testReplayBulkBadInput},
	{"ReplayBulkList", testReplayBulkList},
	{"ReplayBulkFilter", testReplayBulkFilter},
	{"ReplayBulkDryRun", testReplayBulkDryRun},
	{"ReplayBulkStdin", testReplayBulkStdin},
	{"ReplayBulkInterrupt", testReplayBulkInterrupt},
	{"FromStreamIsBounded", testFromStreamIsBounded},
	{"ReplayBulkHelp", testReplayBulkHelp},
	{"Requeue", testRequeue},
	{"RequeueBulk", testRequeueBulk},
	{"EnqueueBulk", testEnqueueBulk},
	{"EnqueueBulkBatches", testEnqueueBulkBatches},
	{"DefinitionsPause", testDefinitionsPause},
	{"ExitCodes", testExitCodes},
	{"InputLimitsExit2", testInputLimits},
	{"HumanOutput", testHumanOutput},
	{"GlobalFlagsBeforeCommand", testGlobalFlagsBeforeCommand},
	{"Demo", testDemo},
	{"DemoJSON", testDemoJSON},
	{"DemoWithDatabaseURL", testDemoWithDatabaseURL},
	{"DemoInterruptedWhileStarting", testDemoInterrupted},
	{"DemoInterruptedMidStory", testDemoInterruptedMidStory},
	{"DemoKeepUntilSignal", testDemoKeep},
	{"DemoWithoutPostgreSQL", testDemoWithoutPostgreSQL},
	{"DemoStepFails", testDemoStepFails},
	{"Stats", testStats},
	{"Prune", testPrune},
	{"PruneKilled", testPruneKilled},
}

func TestCLI(t *testing.T) {
	c := buildCLI(t)
	for _, tc := range cliTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, c)
		})
	}
}

// cli runs the built runledger binary.
type cli struct {
	bin string
}

// buildCLI builds the command with go build (with -race under -race) into
// a temp dir of t.
func buildCLI(t *testing.T) *cli {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "runledger")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-o", bin}
	if raceBuild {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return &cli{bin: bin}
}

// outcome is what one run of the binary did.
type outcome struct {
	code   int
	stdout string
	stderr string
}

// env is the environment of a run: DATABASE_URL (and TMPDIR when set)
// replace the test process's.
type env struct {
	databaseURL string
	tmpDir      string
}

// run runs the binary with args in environment e and waits for it.
func (c *cli) run(t *testing.T, e env, args ...string) outcome {
	t.Helper()
	cmd := c.command(t, e, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := outcome{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		out.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run runledger %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (c *cli) command(t *testing.T, e env, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !(e.tmpDir != "" && strings.HasPrefix(kv, "TMPDIR=")) {
			environ = append(environ, kv)
		}
	}
	if e.databaseURL != "" {
		environ = append(environ, "DATABASE_URL="+e.databaseURL)
	}
	if e.tmpDir != "" {
		environ = append(environ, "TMPDIR="+e.tmpDir)
	}
	if raceBuild && os.Getenv("GORACE") == "" {
		// A race-instrumented program sleeps a second at exit by default.
		environ = append(environ, "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	}
	cmd.Env = environ
	return cmd
}

// ok runs args and fails the test unless they exit 0.
func (c *cli) ok(t *testing.T, e env, args ...string) outcome {
	t.Helper()
	out := c.run(t, e, args...)
	if out.code != 0 {
		t.Fatalf("runledger %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), out.code, out.stdout, out.stderr)
	}
	return out
}

// want runs args and fails the test unless they exit with code.
func (c *cli) want(t *testing.T, code int, e env, args ...string) outcome {
	t.Helper()
	out := c.run(t, e, args...)
	if out.code != code {
		t.Fatalf("runledger %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), out.code, code, out.stdout, out.stderr)
	}
	return out
}

// object decodes s as exactly one JSON object.
func object(t *testing.T, s string) map[string]json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, s)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", s)
	}
	if m == nil {
		t.Fatalf("JSON null, want an object:\n%s", s)
	}
	return m
}

// sub decodes the object under key.
func sub(t *testing.T, m map[string]json.RawMessage, key string) map[string]json.RawMessage {
	t.Helper()
	raw, ok := m[key]
	if !ok {
		t.Fatalf("no key %q in %v", key, keys(m))
	}
	return object(t, string(raw))
}

// list decodes the array of objects under key.
func list(t *testing.T, m map[string]json.RawMessage, key string) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	if err := json.Unmarshal(m[key], &out); err != nil || out == nil {
		t.Fatalf("%q is not an array of objects: %v (%s)", key, err, m[key])
	}
	return out
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// wantKeys fails unless m has exactly the given keys.
func wantKeys(t *testing.T, what string, m map[string]json.RawMessage, want ...string) {
	t.Helper()
	want = append([]string(nil), want...) // callers pass shared slices (jobKeys) from parallel tests
	sort.Strings(want)
	if got := keys(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s keys = %v, want %v", what, got, want)
	}
}

// str returns the JSON string under key.
func str(t *testing.T, m map[string]json.RawMessage, key string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(m[key], &s); err != nil {
		t.Fatalf("%q = %s, want a string", key, m[key])
	}
	return s
}

// num returns the JSON integer under key.
func num(t *testing.T, m map[string]json.RawMessage, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(string(m[key]), 10, 64)
	if err != nil {
		t.Fatalf("%q = %s, want an integer", key, m[key])
	}
	return n
}

// isNull reports whether the value under key is JSON null.
func isNull(m map[string]json.RawMessage, key string) bool {
	return string(m[key]) == "null"
}

// wantUTC fails unless the value under key is an RFC 3339 time in UTC
// ("Z"), and returns it.
func wantUTC(t *testing.T, m map[string]json.RawMessage, key string) time.Time {
	t.Helper()
	s := str(t, m, key)
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("%q = %q, want RFC 3339 UTC", key, s)
	}
	return ts
}

// jobKeys are the fields of a job object (runledger.Job's JSON).
var jobKeys = []string{
	"id", "job_type", "organization_id", "payload", "status", "priority", "run_number", "attempt",
	"max_attempts", "timeout_seconds", "next_run_at", "lease_expires_at", "last_heartbeat_at", "worker_id",
	"started_at", "finished_at", "stage", "progress_done", "progress_total", "progress_pct", "checkpoint",
	"output", "idempotency_key", "status_reason", "last_error_code", "last_error_message", "created_at",
	"updated_at", "execution_resource_key",
}

// wantJob checks a job object's key set and time encoding.
func wantJob(t *testing.T, what string, j map[string]json.RawMessage) {
	t.Helper()
	wantKeys(t, what, j, jobKeys...)
	for _, k := range []string{"next_run_at", "created_at", "updated_at"} {
		wantUTC(t, j, k)
	}
	for _, k := range []string{"lease_expires_at", "last_heartbeat_at", "started_at", "finished_at"} {
		if !isNull(j, k) {
			wantUTC(t, j, k)
		}
	}
}

// wantError checks a --json error on stderr and returns its code.
func wantError(t *testing.T, out outcome, category string) string {
	t.Helper()
	if out.stdout != "" {
		t.Fatalf("stdout = %q, want nothing on an error", out.stdout)
	}
	e := sub(t, object(t, out.stderr), "error")
	wantKeys(t, "error", e, "code", "category", "message")
	if got := str(t, e, "category"); got != category {
		t.Fatalf("error category = %q, want %q (%s)", got, category, out.stderr)
	}
	if str(t, e, "message") == "" || str(t, e, "code") == "" {
		t.Fatalf("error without code or message: %s", out.stderr)
	}
	return str(t, e, "code")
}

// wantOneLine fails unless s is a single non-empty line.
func wantOneLine(t *testing.T, s string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") || strings.TrimSpace(s) == "" {
		t.Fatalf("want exactly one line, got %q", s)
	}
}

// unreachableURL returns a database URL on a loopback port nothing listens
// on, and that port.
func unreachableURL(t *testing.T) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/runledger?sslmode=disable", port
}

// db is a fresh migrated database for one test.
func db(t *testing.T) env {
	t.Helper()
	return env{databaseURL: testdb.NewURL(t)}
}

// define creates job type typ with the CLI.
func (c *cli) define(t *testing.T, e env, typ string, extra ...string) {
	t.Helper()
	c.ok(t, e, append([]string{"definitions", "upsert", "--type", typ}, extra...)...)
}

// enqueue enqueues a job with the CLI and returns the job object.
func (c *cli) enqueue(t *testing.T, e env, args ...string) map[string]json.RawMessage {
	t.Helper()
	out := c.ok(t, e, append([]string{"enqueue", "--json"}, args...)...)
	return sub(t, object(t, out.stdout), "job")
}

// succeeded enqueues a job of typ and takes it through claim and complete,
// returning its id. org may be "".
func (c *cli) succeeded(t *testing.T, e env, typ, org string) string {
	t.Helper()
	args := []string{"--type", typ, "--payload", `{"invoice":7}`}
	if org != "" {
		args = append(args, "--org", org)
	}
	id := str(t, c.enqueue(t, e, args...), "id")
	claimed := list(t, object(t, c.ok(t, e, "claim", "--worker", "w-"+typ, "--type", typ, "--json").stdout), "jobs")
	if len(claimed) != 1 || str(t, claimed[0], "id") != id {
		t.Fatalf("claim returned %v, want job %s", claimed, id)
	}
	c.ok(t, e, "complete", "--job", id, "--run", "1", "--attempt", "1", "--worker", "w-"+typ, "--output", `{"ok":true}`)
	return id
}

// emptyDB is a fresh database without the schema.
func emptyDB(t *testing.T) string {
	t.Helper()
	return testdb.NewEmpty(t)
}
