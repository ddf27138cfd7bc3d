package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The command line as a whole, beside each command's own tests: help,
// usage errors, a missing or unreachable database, exit codes, global
// flags, the human output and the input limits.

func testHelp(t *testing.T, c *cli) {
	none := env{}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		out := c.ok(t, none, args...)
		for _, cmd := range commands {
			if !strings.Contains(out.stdout, cmd.name) {
				t.Errorf("runledger %v does not list %q", args, cmd.name)
			}
		}
		for code := 0; code <= 5; code++ {
			if !strings.Contains(out.stdout, fmt.Sprintf("\n  %d  ", code)) {
				t.Errorf("runledger %v does not explain exit code %d", args, code)
			}
		}
	}
	for _, cmd := range commands {
		words := cmd.words()
		fs := newFlagSet(cmd.name)
		defineGlobalFlags(fs, false, "")
		cmd.setup(fs)
		for _, args := range [][]string{
			append([]string{"help"}, words...),
			append(append([]string{}, words...), "--help"),
			append(append([]string{}, words...), "-h"),
		} {
			out := c.ok(t, none, args...)
			if !strings.Contains(out.stdout, "Usage:\n  runledger "+cmd.name) {
				t.Errorf("runledger %v: no usage line:\n%s", args, out.stdout)
			}
			for _, name := range fs.order {
				if !strings.Contains(out.stdout, "--"+name) {
					t.Errorf("runledger %v does not explain --%s", args, name)
				}
			}
		}
	}
	for _, group := range []string{"migrate", "definitions", "jobs"} {
		for _, args := range [][]string{{"help", group}, {group, "--help"}} {
			out := c.ok(t, none, args...)
			for _, sub := range subcommands(group) {
				if !strings.Contains(out.stdout, group+" "+sub) {
					t.Errorf("runledger %v does not list %s %s", args, group, sub)
				}
			}
		}
	}
	h := object(t, c.ok(t, none, "help", "replay", "--json").stdout)
	if !strings.Contains(str(t, h, "help"), "expectation_mismatch") {
		t.Errorf("help --json: %v", h)
	}
	out := c.want(t, 2, none, "help", "frobnicate")
	wantOneLine(t, out.stderr)
}

// testUsageErrors: bad input exits 2 with a one-line message before any
// database work: DATABASE_URL points at a port nothing listens on, so
// touching the database would exit 1 instead.
func testUsageErrors(t *testing.T, c *cli) {
	url, _ := unreachableURL(t)
	e := env{databaseURL: url}
	id := uuid.NewString()
	cases := []struct {
		name     string
		args     []string
		code     string // error code in --json
		contains string // in the one-line message
	}{
		{"malformed UUID", []string{"replay", "--job", "not-a-uuid", "--run", "1", "--key", "k", "--reason", "r"}, "cli.invalid_argument", "--job"},
		{"malformed org", []string{"enqueue", "--type", "t", "--org", "42"}, "cli.invalid_argument", "--org"},
		{"positional UUID", []string{"jobs", "show", "zzz"}, "cli.invalid_argument", "zzz"},
		{"run not an integer", []string{"replay", "--job", id, "--run", "one", "--key", "k", "--reason", "r"}, "cli.invalid_argument", "--run"},
		{"run out of range", []string{"complete", "--job", id, "--run", "9999999999", "--attempt", "1", "--worker", "w"}, "cli.invalid_argument", "--run"},
		{"attempt not an integer", []string{"fail", "--job", id, "--run", "1", "--attempt", "1.5", "--worker", "w"}, "cli.invalid_argument", "--attempt"},
		{"empty type filter", []string{"claim", "--worker", "w", "--type", " , "}, "cli.invalid_argument", "--type"},
		{"limit not an integer", []string{"claim", "--worker", "w", "--limit", "many"}, "cli.invalid_argument", "--limit"},
		{"limit out of bounds", []string{"claim", "--worker", "w", "--limit", "0"}, "job.claim_limit_invalid", "limit"},
		{"priority not an integer", []string{"enqueue", "--type", "t", "--priority", "high"}, "cli.invalid_argument", "--priority"},
		{"definition priority not an integer", []string{"definitions", "upsert", "--type", "t", "--priority", "x"}, "cli.invalid_argument", "--priority"},
		{"max attempts not positive", []string{"definitions", "upsert", "--type", "t", "--max-attempts", "0"}, "job.max_attempts_invalid", "attempts"},
		{"payload not JSON", []string{"enqueue", "--type", "t", "--payload", "{bad"}, "cli.invalid_argument", "--payload"},
		{"payload empty", []string{"enqueue", "--type", "t", "--payload", ""}, "cli.invalid_argument", "--payload"},
		{"output not JSON", []string{"complete", "--job", id, "--run", "1", "--attempt", "1", "--worker", "w", "--output", "[1,"}, "cli.invalid_argument", "--output"},
		{"lease not a duration", []string{"claim", "--worker", "w", "--lease", "5"}, "cli.invalid_argument", "--lease"},
		{"retry delay not a duration", []string{"fail", "--job", id, "--run", "1", "--attempt", "1", "--worker", "w", "--retry-delay", "soon"}, "cli.invalid_argument", "--retry-delay"},
		{"enabled not a boolean", []string{"definitions", "upsert", "--type", "t", "--enabled=maybe"}, "cli.invalid_argument", "--enabled"},
		{"unknown flag", []string{"enqueue", "--type", "t", "--colour", "red"}, "cli.usage", "--colour"},
		{"flag without value", []string{"enqueue", "--type"}, "cli.usage", "--type"},
		{"missing required flag", []string{"replay", "--job", id, "--run", "1", "--key", "k"}, "cli.usage", "--reason"},
		{"missing several required flags", []string{"complete", "--job", id}, "cli.usage", "--run, --attempt, --worker"},
		{"missing type", []string{"enqueue"}, "cli.usage", "--type"},
		{"missing worker", []string{"claim"}, "cli.usage", "--worker"},
		{"missing positional", []string{"jobs", "show", "--org", id}, "cli.usage", "UUID"},
		{"extra positional", []string{"jobs", "show", id, id}, "cli.usage", "unexpected argument"},
		{"unexpected argument", []string{"claim", "--worker", "w", "now"}, "cli.usage", "unexpected argument"},
		{"unknown command", []string{"frobnicate"}, "cli.usage", "frobnicate"},
		{"unknown subcommand", []string{"migrate", "sideways"}, "cli.usage", "sideways"},
		{"missing subcommand", []string{"migrate"}, "cli.usage", "up, down, status, version"},
		{"unknown jobs subcommand", []string{"jobs", "list"}, "cli.usage", "list"},
		{"no command", nil, "cli.usage", "missing command"},
		{"blank replay key", []string{"replay", "--job", id, "--run", "1", "--key", " ", "--reason", "r"}, "job.replay_request_key_blank", "key"},
		{"blank reason", []string{"replay", "--job", id, "--run", "1", "--key", "k", "--reason", ""}, "job.replay_reason_blank", "reason"},
		{"blank worker", []string{"claim", "--worker", " "}, "job.worker_id_blank", "Worker"},
		{"negative lease", []string{"claim", "--worker", "w", "--lease", "-5s"}, "job.lease_duration_invalid", "Lease"},
		{"nil-UUID organization (replay)", []string{"replay", "--job", id, "--run", "1", "--key", "k", "--reason", "r", "--org", uuid.Nil.String()}, "job.organization_invalid", "nil UUID"},
		{"nil-UUID organization (enqueue)", []string{"enqueue", "--type", "t", "--org", uuid.Nil.String()}, "job.organization_invalid", "nil UUID"},
		{"nil-UUID organization (jobs show)", []string{"jobs", "show", id, "--org", uuid.Nil.String()}, "job.organization_invalid", "nil UUID"},
		{"empty idempotency key", []string{"enqueue", "--type", "t", "--idempotency-key", ""}, "cli.invalid_argument", "--idempotency-key"},
		{"bad database URL", []string{"migrate", "up", "--database-url", "postgres://%zz"}, "cli.database_url_invalid", "database URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := c.want(t, 2, e, tc.args...)
			wantOneLine(t, out.stderr)
			if out.stdout != "" {
				t.Errorf("stdout = %q, want nothing", out.stdout)
			}
			if !strings.Contains(out.stderr, tc.contains) {
				t.Errorf("message %q does not mention %q", out.stderr, tc.contains)
			}
			if strings.Contains(out.stderr, "goroutine") || strings.Contains(out.stderr, "panic") {
				t.Errorf("stack trace on stderr: %s", out.stderr)
			}
			// --json before the command: after it, "--type --json" would
			// read --json as the type.
			jsonOut := c.want(t, 2, e, append([]string{"--json"}, tc.args...)...)
			if got := wantError(t, jsonOut, "validation"); got != tc.code {
				t.Errorf("error code = %q, want %q", got, tc.code)
			}
		})
	}
}

func testMissingDatabaseURL(t *testing.T, c *cli) {
	for _, args := range [][]string{
		{"migrate", "up"},
		{"enqueue", "--type", "t"},
		{"jobs", "show", uuid.NewString()},
		{"replay", "--job", uuid.NewString(), "--run", "1", "--key", "k", "--reason", "r"},
	} {
		out := c.want(t, 2, env{}, args...)
		wantOneLine(t, out.stderr)
		if !strings.Contains(out.stderr, "DATABASE_URL") || !strings.Contains(out.stderr, "--database-url") {
			t.Errorf("runledger %v: message %q does not say how to configure the database", args, out.stderr)
		}
		if code := wantError(t, c.want(t, 2, env{}, append(args, "--json")...), "validation"); code != "cli.database_url_missing" {
			t.Errorf("code = %q", code)
		}
	}
}

func testUnreachableDatabase(t *testing.T, c *cli) {
	url, port := unreachableURL(t)
	e := env{databaseURL: url}
	where := fmt.Sprintf("127.0.0.1:%d", port)
	for _, args := range [][]string{
		{"migrate", "status"},
		{"definitions", "upsert", "--type", "t"},
		{"enqueue", "--type", "t"},
		{"claim", "--worker", "w"},
		{"jobs", "show", uuid.NewString()},
		{"replay", "--job", uuid.NewString(), "--run", "1", "--key", "k", "--reason", "r"},
	} {
		out := c.want(t, 1, e, args...)
		wantOneLine(t, out.stderr)
		if !strings.Contains(out.stderr, "cannot reach database at "+where) || !strings.Contains(out.stderr, "connection refused") {
			t.Errorf("runledger %v: %q does not name %s and the cause", args, out.stderr, where)
		}
		jsonOut := c.want(t, 1, e, append(args, "--json")...)
		if code := wantError(t, jsonOut, "transient"); code != "db.transient" {
			t.Errorf("code = %q, want db.transient", code)
		}
	}
	// --database-url wins over DATABASE_URL.
	out := c.want(t, 1, env{databaseURL: "postgres://nobody@127.0.0.1:1/x"}, "migrate", "version", "--database-url", url)
	if !strings.Contains(out.stderr, where) {
		t.Errorf("--database-url did not take precedence: %s", out.stderr)
	}
}

// testExitCodes reaches every exit code with a real scenario on one
// database.
func testExitCodes(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "x")
	src := c.succeeded(t, e, "x", "")
	url, _ := unreachableURL(t)
	cases := []struct {
		code int
		e    env
		args []string
	}{
		{0, e, []string{"replay", "--job", src, "--run", "1", "--key", "a", "--reason", "r"}},
		{1, env{databaseURL: url}, []string{"replay", "--job", src, "--run", "1", "--key", "a", "--reason", "r"}},
		{2, e, []string{"replay", "--job", src, "--run", "one", "--key", "a", "--reason", "r"}},
		{3, e, []string{"replay", "--job", src, "--run", "2", "--key", "a", "--reason", "r"}},
		{3, e, []string{"complete", "--job", src, "--run", "1", "--attempt", "1", "--worker", "w-x"}},
		{4, e, []string{"replay", "--job", src, "--run", "1", "--key", "a", "--reason", "r", "--org", uuid.NewString()}},
		{4, e, []string{"jobs", "show", uuid.NewString()}},
		{5, e, []string{"replay", "--job", src, "--run", "1", "--key", "a", "--reason", "changed"}},
	}
	for _, tc := range cases {
		c.want(t, tc.code, tc.e, tc.args...)
	}
}

func testHumanOutput(t *testing.T, c *cli) {
	e := db(t)
	out := c.ok(t, e, "definitions", "upsert", "--type", "mail")
	if !strings.HasPrefix(out.stdout, "Defined job type mail, version 1: enabled") {
		t.Errorf("definitions upsert: %s", out.stdout)
	}
	out = c.ok(t, e, "enqueue", "--type", "mail", "--payload", `{"to":"x"}`, "--idempotency-key", "m-1")
	if !strings.HasPrefix(out.stdout, "Enqueued job ") || !strings.Contains(out.stdout, `payload          {"to":"x"}`) {
		t.Errorf("enqueue:\n%s", out.stdout)
	}
	out = c.ok(t, e, "enqueue", "--type", "mail", "--payload", `{"to":"x"}`, "--idempotency-key", "m-1")
	if !strings.Contains(out.stdout, "already exists") {
		t.Errorf("keyed retry:\n%s", out.stdout)
	}
	out = c.ok(t, e, "claim", "--worker", "w")
	if !strings.HasPrefix(out.stdout, "Leased 1 job to worker w for 30s.") || !strings.Contains(out.stdout, "finish with: runledger complete --job ") {
		t.Errorf("claim:\n%s", out.stdout)
	}
	if out := c.ok(t, e, "claim", "--worker", "w"); out.stdout != "No due jobs to claim.\n" {
		t.Errorf("empty claim: %q", out.stdout)
	}
	if out := c.ok(t, e, "migrate", "version"); !strings.Contains(out.stdout, "the latest") {
		t.Errorf("migrate version: %s", out.stdout)
	}
	src := c.succeeded(t, e, "mail", "")
	out = c.ok(t, e, "replay", "--job", src, "--run", "1", "--key", "k", "--reason", "r")
	if !strings.HasPrefix(out.stdout, "Replayed (inserted): job "+src+" run 1 is replayed as new job ") {
		t.Errorf("replay: %s", out.stdout)
	}
	out = c.ok(t, e, "replay", "--job", src, "--run", "1", "--key", "k", "--reason", "r")
	if !strings.HasPrefix(out.stdout, "Replayed (existing)") {
		t.Errorf("replay retry: %s", out.stdout)
	}
	out = c.want(t, 3, e, "replay", "--job", src, "--run", "3", "--key", "k", "--reason", "r")
	if !strings.HasPrefix(out.stdout, "Expectation mismatch: job "+src+" is SUCCEEDED at run 1, not SUCCEEDED at run 3") {
		t.Errorf("mismatch: %s", out.stdout)
	}
	out = c.want(t, 4, e, "replay", "--job", src, "--run", "1", "--key", "k", "--reason", "r", "--org", uuid.NewString())
	if !strings.HasPrefix(out.stdout, "Not found: no job "+src) {
		t.Errorf("not found: %s", out.stdout)
	}
	out = c.want(t, 5, e, "replay", "--job", src, "--run", "1", "--key", "k", "--reason", "other")
	wantOneLine(t, out.stderr)
	if !strings.Contains(out.stderr, "job.replay_idempotency_conflict") || out.stdout != "" {
		t.Errorf("conflict: stdout %q stderr %q", out.stdout, out.stderr)
	}
}

func testGlobalFlagsBeforeCommand(t *testing.T, c *cli) {
	e := db(t)
	url := e.databaseURL
	out := c.ok(t, env{}, "--database-url", url, "--json", "migrate", "version")
	if v := object(t, out.stdout); num(t, v, "version") != num(t, v, "latest") {
		t.Fatalf("version = %v", v)
	}
	out = c.want(t, 2, env{}, "--json", "enqueue")
	wantError(t, out, "validation")
	// --json=false after the command overrides --json before it.
	out = c.ok(t, env{}, "--json", "migrate", "version", "--database-url="+url, "--json=false")
	if !strings.HasPrefix(out.stdout, "The database is at version") {
		t.Fatalf("text wanted: %q", out.stdout)
	}
}

// testInputLimits: a job type over the documented maximum is refused up
// front with a validation error (exit 2), not sent to the database to fail
// as an index row too large; the longest accepted type works end to end.
func testInputLimits(t *testing.T, c *cli) {
	e := db(t)
	long := strings.Repeat("t", 9000)
	for _, args := range [][]string{
		{"definitions", "upsert", "--type", long, "--json"},
		{"enqueue", "--type", long, "--json"},
		{"claim", "--worker", "w", "--type", long, "--json"},
	} {
		if code := wantError(t, c.want(t, 2, e, args...), "validation"); code != "job.job_type_too_long" {
			t.Fatalf("%s: code = %s, want job.job_type_too_long", args[0], code)
		}
	}
	longest := strings.Repeat("t", 255)
	c.define(t, e, longest)
	if j := c.enqueue(t, e, "--type", longest); str(t, j, "job_type") != longest {
		t.Fatalf("job_type = %s", j["job_type"])
	}
}
