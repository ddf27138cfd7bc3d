package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
)

// bulkSummaryLine is the exact --json summary line of replay-bulk.
func bulkSummaryLine(dryRun bool, selected, inserted, existing, conflict, mismatch, notFound, workflow, definition int) string {
	return fmt.Sprintf(`{"outcome":"bulk_replay","dry_run":%t,"selected":%d,"inserted":%d,"existing":%d,"conflict":%d,"mismatch":%d,"not_found":%d,"workflow_managed":%d,"definition_unavailable":%d}`,
		dryRun, selected, inserted, existing, conflict, mismatch, notFound, workflow, definition)
}

// bulkDB is a fresh migrated database for replay-bulk tests, with a pool on
// it for setup and inspection.
type bulkDB struct {
	env  env
	pool *pgxpool.Pool
}

func newBulkDB(t *testing.T) bulkDB {
	t.Helper()
	e := db(t)
	return bulkDB{env: e, pool: testdb.OpenPool(t, e.databaseURL, 2, nil)}
}

// seed inserts n SUCCEEDED jobs of typ at run 1 in scope (test SQL) and
// returns their ids in insertion order.
func (b bulkDB) seed(t *testing.T, typ string, scope runledger.Scope, n int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for range n {
		s := testdb.Succeeded(scope)
		s.JobType = typ
		ids = append(ids, testdb.Seed(t, b.pool, s))
	}
	return ids
}

// tables is the row count of every table replay writes.
func (b bulkDB) tables(t *testing.T) [3]int64 {
	t.Helper()
	return [3]int64{testdb.Count(t, b.pool, "job_queue"), testdb.Count(t, b.pool, "job_events"), testdb.Count(t, b.pool, "job_replays")}
}

// replayOf returns the replay job id made from source under key.
func (b bulkDB) replayOf(t *testing.T, source uuid.UUID, key string) uuid.UUID {
	t.Helper()
	return testdb.Scalar[uuid.UUID](t, b.pool, `SELECT replay_job_id FROM job_replays WHERE source_job_id = $1 AND replay_request_key = $2`, source, key)
}

// writeList writes a --from file of lines and returns its path.
func writeList(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sources.txt")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runStdin runs the binary with stdin.
func (c *cli) runStdin(t *testing.T, e env, stdin string, args ...string) outcome {
	t.Helper()
	cmd := c.command(t, e, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := outcome{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(interface{ ExitCode() int }); ok && err != nil {
		out.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonLines splits --json output into its lines, failing unless each is
// one JSON object.
func jsonLines(t *testing.T, s string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for _, l := range lines {
		object(t, l)
	}
	return lines
}

// testReplayBulkBadInput: every bad input exits 2 with a one-line message
// and writes nothing, on a database with replayable sources (the lists name
// them before the bad line); with an unreachable database it still exits
// 2, so the input is checked before any database work.
func testReplayBulkBadInput(t *testing.T, c *cli) {
	b := newBulkDB(t)
	ids := b.seed(t, "email", runledger.Global(), 2)
	before := b.tables(t)
	unreachable, _ := unreachableURL(t)
	good := fmt.Sprintf("%s 1", ids[0])
	dir := t.TempDir()
	base := []string{"replay-bulk", "--key", "k", "--reason", "r"}
	cases := []struct {
		name     string
		args     []string
		stdin    string
		code     string   // error code under --json
		contains []string // in the message
	}{
		{"missing key", []string{"replay-bulk", "--reason", "r", "--type", "email"}, "", "cli.usage", []string{"--key"}},
		{"missing reason", []string{"replay-bulk", "--key", "k", "--type", "email"}, "", "cli.usage", []string{"--reason"}},
		{"blank key", []string{"replay-bulk", "--key", " ", "--reason", "r", "--type", "email"}, "", "job.replay_request_key_blank", []string{"key"}},
		{"blank reason", []string{"replay-bulk", "--key", "k", "--reason", "", "--type", "email"}, "", "job.replay_reason_blank", []string{"reason"}},
		{"neither selection", base, "", "cli.usage", []string{"--from", "--type"}},
		{"both selections", append(base, "--type", "email", "--from", writeList(t, good)), "", "cli.usage", []string{"--from", "--type"}},
		{"filter without type", append(base, "--succeeded-since", "2026-01-01T00:00:00Z"), "", "cli.usage", []string{"--type"}},
		{"limit with a list", append(base, "--from", writeList(t, good), "--limit", "5"), "", "cli.usage", []string{"--limit", "--from"}},
		{"blank type", append(base, "--type", " "), "", "job.job_type_blank", []string{"--type"}},
		{"malformed line", append(base, "--from", writeList(t, "# header", good, "", "not-a-uuid 1")), "", "cli.invalid_argument", []string{"line 4", "not-a-uuid"}},
		{"three fields", append(base, "--from", writeList(t, good, ids[1].String()+" 1 extra")), "", "cli.invalid_argument", []string{"line 2", "UUID RUN"}},
		{"run missing", append(base, "--from", writeList(t, good, ids[1].String())), "", "cli.invalid_argument", []string{"line 2"}},
		{"run not an integer", append(base, "--from", writeList(t, good, ids[1].String()+" one")), "", "cli.invalid_argument", []string{"line 2", "run"}},
		{"run not positive", append(base, "--from", writeList(t, good, ids[1].String()+" 0")), "", "cli.invalid_argument", []string{"line 2", "positive"}},
		{"duplicate source", append(base, "--from", writeList(t, good, ids[1].String()+" 1", ids[0].String()+" 2")), "", "job.replay_bulk_duplicate_source", []string{"line 3", "duplicate", "line 1"}},
		{"empty file", append(base, "--from", writeList(t)), "", "job.replay_bulk_sources_empty", []string{"empty"}},
		{"only comments", append(base, "--from", writeList(t, "# nothing", "   ", "  # here")), "", "job.replay_bulk_sources_empty", []string{"empty", "no sources"}},
		{"missing file", append(base, "--from", filepath.Join(dir, "nope.txt")), "", "cli.invalid_argument", []string{"cannot read", "nope.txt", "no such file"}},
		{"directory", append(base, "--from", dir), "", "cli.invalid_argument", []string{"cannot read", "directory"}},
		{"empty file name", append(base, "--from", ""), "", "cli.invalid_argument", []string{"--from"}},
		{"malformed stdin", append(base, "--from", "-"), good + "\n" + "zzz 1\n", "cli.invalid_argument", []string{"stdin line 2"}},
		{"empty stdin", append(base, "--from", "-"), "", "job.replay_bulk_sources_empty", []string{"stdin", "empty"}},
		{"since equals until", append(base, "--type", "email", "--succeeded-since", "2026-01-01T10:00:00Z", "--succeeded-until", "2026-01-01T10:00:00Z"), "", "job.replay_bulk_range_invalid", []string{"--succeeded-since", "before", "--succeeded-until"}},
		{"since after until", append(base, "--type", "email", "--succeeded-since", "2026-01-02T00:00:00Z", "--succeeded-until", "2026-01-01T00:00:00Z"), "", "job.replay_bulk_range_invalid", []string{"not before"}},
		{"since not RFC 3339", append(base, "--type", "email", "--succeeded-since", "yesterday"), "", "cli.invalid_argument", []string{"--succeeded-since", "RFC 3339"}},
		{"limit zero", append(base, "--type", "email", "--limit", "0"), "", "job.replay_bulk_limit_invalid", []string{"--limit", "positive"}},
		{"limit negative", append(base, "--type", "email", "--limit", "-3"), "", "job.replay_bulk_limit_invalid", []string{"--limit", "positive"}},
		{"chunk zero", append(base, "--type", "email", "--chunk", "0"), "", "job.replay_bulk_chunk_invalid", []string{"--chunk", "positive"}},
		{"chunk negative", append(base, "--from", writeList(t, good), "--chunk", "-1"), "", "job.replay_bulk_chunk_invalid", []string{"--chunk", "positive"}},
		{"rate zero", append(base, "--from", writeList(t, good), "--rate", "0"), "", "job.replay_bulk_rate_invalid", []string{"--rate", "positive"}},
		{"chunk not an integer", append(base, "--type", "email", "--chunk", "many"), "", "cli.invalid_argument", []string{"--chunk"}},
		{"org not a UUID", append(base, "--type", "email", "--org", "acme"), "", "cli.invalid_argument", []string{"--org"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := c.runStdin(t, b.env, tc.stdin, tc.args...)
			if out.code != exitUsage {
				t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", out.code, out.stdout, out.stderr)
			}
			wantOneLine(t, out.stderr)
			if out.stdout != "" {
				t.Errorf("stdout = %q, want nothing", out.stdout)
			}
			for _, want := range tc.contains {
				if !strings.Contains(out.stderr, want) {
					t.Errorf("message %q does not mention %q", out.stderr, want)
				}
			}
			jsonOut := c.runStdin(t, env{databaseURL: unreachable}, tc.stdin, append([]string{"--json"}, tc.args...)...)
			if jsonOut.code != exitUsage {
				t.Fatalf("unreachable database, --json: exit %d, want 2 (database work before validation?)\nstderr: %s", jsonOut.code, jsonOut.stderr)
			}
			if got := wantError(t, jsonOut, "validation"); got != tc.code {
				t.Errorf("error code = %q, want %q", got, tc.code)
			}
		})
	}
	if after := b.tables(t); after != before {
		t.Fatalf("bad input wrote rows: job_queue, job_events, job_replays = %v, want %v", after, before)
	}
}

// testReplayBulkList: a list with every outcome prints one detail line per
// source and the summary, exactly in the contract's shapes, and exits 6; a
// rerun reports the replayed ones existing with the same replay jobs.
func testReplayBulkList(t *testing.T, c *cli) {
	b := newBulkDB(t)
	org := uuid.New()
	scope := runledger.Organization(org)
	ok := b.seed(t, "email", scope, 3)
	stale := b.seed(t, "email", scope, 1)[0]
	otherTenant := b.seed(t, "email", runledger.Organization(uuid.New()), 1)[0]
	managed := b.seed(t, "email", scope, 1)[0]
	testdb.OwnByWorkflowStep(t, b.pool, managed)
	disabled := b.seed(t, "email.off", scope, 1)[0]
	testdb.Exec(t, b.pool, `UPDATE job_definitions SET is_enabled = false WHERE job_type = 'email.off'`)
	missing := uuid.New()
	// ok[2] is replayed first under the same key with another reason: a
	// per-source conflict.
	c.ok(t, b.env, "replay", "--job", ok[2].String(), "--run", "1", "--key", "incident-7", "--reason", "earlier", "--org", org.String())
	conflictReplay := b.replayOf(t, ok[2], "incident-7")

	list := writeList(t,
		"# incident 7: resend",
		ok[0].String()+" 1",
		"  "+ok[1].String()+"\t1  ",
		ok[2].String()+" 1",
		"",
		stale.String()+" 2",
		otherTenant.String()+" 1",
		managed.String()+" 1",
		disabled.String()+" 1",
		missing.String()+" 1",
	)
	args := []string{"replay-bulk", "--key", "incident-7", "--reason", "resend", "--from", list, "--org", org.String(), "--chunk", "3", "--json", "--details"}
	before := b.tables(t)
	out := c.want(t, exitRefused, b.env, args...)
	lines := jsonLines(t, out.stdout)
	if len(lines) != 9 {
		t.Fatalf("%d lines, want 8 details and the summary:\n%s", len(lines), out.stdout)
	}
	if out.stderr != "" {
		t.Errorf("stderr under --json = %q, want nothing", out.stderr)
	}
	r0, r1 := b.replayOf(t, ok[0], "incident-7"), b.replayOf(t, ok[1], "incident-7")
	want := []string{
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":1,"result":"inserted","replay_job_id":"%s"}`, ok[0], r0),
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":1,"result":"inserted","replay_job_id":"%s"}`, ok[1], r1),
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":1,"result":"conflict"}`, ok[2]),
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":2,"result":"mismatch"}`, stale),
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":1,"result":"not_found"}`, otherTenant),
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":1,"result":"workflow_managed"}`, managed),
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":1,"result":"definition_unavailable"}`, disabled),
		fmt.Sprintf(`{"source_job_id":"%s","source_run_number":1,"result":"not_found"}`, missing),
		bulkSummaryLine(false, 8, 2, 0, 1, 1, 2, 1, 1),
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, lines[i], want[i])
		}
	}
	after := b.tables(t)
	if after[0] != before[0]+2 || after[1] != before[1]+2 || after[2] != before[2]+2 {
		t.Fatalf("rows %v after %v: want 2 jobs, 2 events, 2 lineage rows more", after, before)
	}
	if got := testdb.Scalar[string](t, b.pool, `SELECT reason FROM job_replays WHERE source_job_id = $1 AND replay_request_key = 'incident-7'`, ok[2]); got != "earlier" || b.replayOf(t, ok[2], "incident-7") != conflictReplay {
		t.Errorf("the conflicting source's lineage changed: reason %q", got)
	}

	// The same command again: the replayed ones are existing, the same jobs.
	again := c.want(t, exitRefused, b.env, args...)
	lines = jsonLines(t, again.stdout)
	if lines[0] != strings.Replace(want[0], "inserted", "existing", 1) || lines[1] != strings.Replace(want[1], "inserted", "existing", 1) {
		t.Errorf("rerun details:\n%s", again.stdout)
	}
	if got, w := lines[len(lines)-1], bulkSummaryLine(false, 8, 0, 2, 1, 1, 2, 1, 1); got != w {
		t.Errorf("rerun summary %s, want %s", got, w)
	}
	if b.tables(t) != after {
		t.Errorf("the rerun wrote rows")
	}

	// Only the replayable ones: exit 0, all existing; without --details the
	// summary is the only line.
	okList := writeList(t, ok[0].String()+" 1", ok[1].String()+" 1")
	res := c.ok(t, b.env, "replay-bulk", "--key", "incident-7", "--reason", "resend", "--from", okList, "--org", org.String(), "--json")
	if got, w := res.stdout, bulkSummaryLine(false, 2, 0, 2, 0, 0, 0, 0, 0)+"\n"; got != w {
		t.Errorf("stdout %q, want %q", got, w)
	}

	// Text form: a readable summary on stdout, a log line per chunk on
	// stderr (not a terminal), one detail line per source with --details.
	txt := c.want(t, exitRefused, b.env, "replay-bulk", "--key", "incident-7", "--reason", "resend", "--from", list, "--org", org.String(), "--chunk", "3", "--details")
	for _, w := range []string{"existing", "job " + ok[0].String() + " run 1  -> replay " + r0.String(), "mismatch", "8 sources selected, 3 chunks", "6 of 8 sources refused (exit 6"} {
		if !strings.Contains(txt.stdout, w) {
			t.Errorf("text output lacks %q:\n%s", w, txt.stdout)
		}
	}
	if n := strings.Count(txt.stderr, "runledger replay-bulk: chunk "); n != 3 {
		t.Errorf("%d chunk log lines, want 3:\n%s", n, txt.stderr)
	}
	if !strings.Contains(txt.stderr, "chunk 3 committed: 2 sources") || !strings.Contains(txt.stderr, "8/8 done") {
		t.Errorf("chunk log:\n%s", txt.stderr)
	}
}

// testReplayBulkFilter: a filter selects the scope's SUCCEEDED jobs of the
// type finished within [since, until), at most --limit, and never another
// tenant's; a rerun reports them existing; a filter matching nothing is a
// summary of zero, exit 0.
func testReplayBulkFilter(t *testing.T, c *cli) {
	b := newBulkDB(t)
	org := uuid.New()
	scope := runledger.Organization(org)
	ids := b.seed(t, "invoice.send", scope, 4)
	b.seed(t, "invoice.send", runledger.Organization(uuid.New()), 2) // another tenant
	b.seed(t, "invoice.send", runledger.Global(), 1)                 // global scope
	b.seed(t, "invoice.other", scope, 1)                             // another type
	pending := b.seed(t, "invoice.send", scope, 1)[0]
	testdb.Exec(t, b.pool, `UPDATE job_queue SET status = 'PENDING', finished_at = NULL, stage = 'queued' WHERE id = $1`, pending)
	for i, at := range []string{"2026-11-30T09:00:00Z", "2026-11-30T10:00:00Z", "2026-11-30T10:59:59.999Z", "2026-11-30T11:00:00Z"} {
		testdb.Exec(t, b.pool, `UPDATE job_queue SET finished_at = $2::timestamptz WHERE id = $1`, ids[i], at)
	}
	before := b.tables(t)
	filter := []string{"replay-bulk", "--type", "invoice.send", "--org", org.String(), "--reason", "lost invoices"}

	// [09:30, 11:00): the second and third job; the fourth finished at 11:00.
	window := append(filter, "--key", "window", "--succeeded-since", "2026-11-30T09:30:00Z", "--succeeded-until", "2026-11-30T11:00:00Z", "--json", "--details")
	out := c.ok(t, b.env, window...)
	lines := jsonLines(t, out.stdout)
	if len(lines) != 3 || lines[2] != bulkSummaryLine(false, 2, 2, 0, 0, 0, 0, 0, 0) {
		t.Fatalf("window:\n%s", out.stdout)
	}
	got := map[string]bool{}
	for _, l := range lines[:2] {
		d := object(t, l)
		wantKeys(t, "detail", d, "source_job_id", "source_run_number", "result", "replay_job_id")
		if str(t, d, "result") != "inserted" || num(t, d, "source_run_number") != 1 {
			t.Errorf("detail %s", l)
		}
		src, _ := uuid.Parse(str(t, d, "source_job_id"))
		if str(t, d, "replay_job_id") != b.replayOf(t, src, "window").String() {
			t.Errorf("detail %s: replay_job_id is not the lineage's", l)
		}
		got[src.String()] = true
	}
	if !got[ids[1].String()] || !got[ids[2].String()] {
		t.Errorf("window selected %v, want %s and %s", got, ids[1], ids[2])
	}
	if after := b.tables(t); after[2] != before[2]+2 {
		t.Fatalf("lineage rows %d, want %d", after[2], before[2]+2)
	}

	// Every SUCCEEDED job of the type in the scope, then the same again.
	all := append(filter, "--key", "all", "--json")
	if got := c.ok(t, b.env, all...).stdout; got != bulkSummaryLine(false, 4, 4, 0, 0, 0, 0, 0, 0)+"\n" {
		t.Errorf("all: %s", got)
	}
	if got := c.ok(t, b.env, all...).stdout; got != bulkSummaryLine(false, 4, 0, 4, 0, 0, 0, 0, 0)+"\n" {
		t.Errorf("all again: %s", got)
	}
	// --limit caps the selection.
	if got := c.ok(t, b.env, append(filter, "--key", "two", "--limit", "2", "--json")...).stdout; got != bulkSummaryLine(false, 2, 2, 0, 0, 0, 0, 0, 0)+"\n" {
		t.Errorf("limit 2: %s", got)
	}
	// The global scope sees only its own job.
	if got := c.ok(t, b.env, "replay-bulk", "--type", "invoice.send", "--key", "global", "--reason", "r", "--json").stdout; got != bulkSummaryLine(false, 1, 1, 0, 0, 0, 0, 0, 0)+"\n" {
		t.Errorf("global: %s", got)
	}
	// Nothing matches: a summary of zero, exit 0.
	none := c.ok(t, b.env, "replay-bulk", "--type", "invoice.none", "--org", org.String(), "--key", "none", "--reason", "r", "--json")
	if none.stdout != bulkSummaryLine(false, 0, 0, 0, 0, 0, 0, 0, 0)+"\n" {
		t.Errorf("no match: %s", none.stdout)
	}
	txt := c.ok(t, b.env, "replay-bulk", "--type", "invoice.none", "--key", "none", "--reason", "r")
	if !strings.Contains(txt.stdout, "No source selected") {
		t.Errorf("no match, text:\n%s", txt.stdout)
	}
	if n := testdb.Scalar[int64](t, b.pool, `SELECT count(*) FROM job_replays r JOIN job_queue j ON j.organization_id = r.organization_id AND j.id = r.replay_job_id WHERE j.organization_id IS DISTINCT FROM $1 AND r.replay_request_key <> 'global'`, org); n != 0 {
		t.Errorf("%d replays outside the scope", n)
	}
}

// testReplayBulkDryRun: a dry run reports what would happen and writes
// nothing; the real run then does it.
func testReplayBulkDryRun(t *testing.T, c *cli) {
	b := newBulkDB(t)
	ids := b.seed(t, "email", runledger.Global(), 3)
	list := writeList(t, ids[0].String()+" 1", ids[1].String()+" 1", ids[2].String()+" 2")
	args := []string{"replay-bulk", "--key", "k", "--reason", "r", "--from", list, "--chunk", "2", "--json"}
	before := b.tables(t)
	dry := c.want(t, exitRefused, b.env, append(args, "--dry-run")...)
	if dry.stdout != bulkSummaryLine(true, 3, 2, 0, 0, 1, 0, 0, 0)+"\n" {
		t.Errorf("dry run: %s", dry.stdout)
	}
	if b.tables(t) != before {
		t.Fatalf("the dry run wrote rows")
	}
	txt := c.want(t, exitRefused, b.env, "replay-bulk", "--key", "k", "--reason", "r", "--from", list, "--dry-run")
	if !strings.Contains(txt.stdout, "dry run") || !strings.Contains(txt.stdout, "nothing written") || !strings.Contains(txt.stderr, "rolled back (dry run)") {
		t.Errorf("dry run, text:\nstdout: %s\nstderr: %s", txt.stdout, txt.stderr)
	}
	if b.tables(t) != before {
		t.Fatalf("the dry run wrote rows")
	}
	real := c.want(t, exitRefused, b.env, args...)
	if real.stdout != bulkSummaryLine(false, 3, 2, 0, 0, 1, 0, 0, 0)+"\n" {
		t.Errorf("real run: %s", real.stdout)
	}
	if after := b.tables(t); after[2] != before[2]+2 {
		t.Errorf("lineage rows %v, want 2 more than %v", after, before)
	}
	// A dry run of a done action: all existing, still nothing written.
	after := b.tables(t)
	if got := c.want(t, exitRefused, b.env, append(args, "--dry-run")...).stdout; got != bulkSummaryLine(true, 3, 0, 2, 0, 1, 0, 0, 0)+"\n" {
		t.Errorf("dry run after: %s", got)
	}
	if b.tables(t) != after {
		t.Errorf("the dry run wrote rows")
	}
}

// testReplayBulkStdin: --from - reads the list from stdin.
func testReplayBulkStdin(t *testing.T, c *cli) {
	b := newBulkDB(t)
	ids := b.seed(t, "email", runledger.Global(), 2)
	stdin := fmt.Sprintf("# from a pipe\n%s 1\r\n%s 1\n", ids[0], ids[1])
	out := c.runStdin(t, b.env, stdin, "replay-bulk", "--key", "k", "--reason", "r", "--from", "-", "--json", "--details")
	if out.code != 0 {
		t.Fatalf("exit %d: %s", out.code, out.stderr)
	}
	lines := jsonLines(t, out.stdout)
	if len(lines) != 3 || lines[2] != bulkSummaryLine(false, 2, 2, 0, 0, 0, 0, 0, 0) {
		t.Fatalf("stdout:\n%s", out.stdout)
	}
	if d := object(t, lines[0]); str(t, d, "source_job_id") != ids[0].String() || str(t, d, "result") != "inserted" {
		t.Errorf("first detail %s", lines[0])
	}
}

// testReplayBulkInterrupt: SIGINT after the first chunk's log line stops
// the action after whole chunks (--rate 1 holds each next chunk a second),
// exits 1 and prints the command that resumes; running it finishes the
// action with no duplicate.
func testReplayBulkInterrupt(t *testing.T, c *cli) {
	b := newBulkDB(t)
	ids := b.seed(t, "email", runledger.Global(), 5)
	var lines []string
	for _, id := range ids {
		lines = append(lines, id.String()+" 1")
	}
	list := writeList(t, lines...)
	args := []string{"replay-bulk", "--key", "k", "--reason", "r", "--from", list, "--chunk", "1", "--rate", "1"}
	cmd := c.command(t, b.env, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var got []string
	signalled := false
	for sc.Scan() {
		got = append(got, sc.Text())
		if !signalled && strings.Contains(sc.Text(), "chunk 1 committed") {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
	}
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(interface{ ExitCode() int }); ok && err != nil {
		code = ee.ExitCode()
	}
	all := strings.Join(got, "\n")
	if !signalled || code != 1 {
		t.Fatalf("exit %d (signalled %t), want 1\nstdout: %s\nstderr: %s", code, signalled, stdout.String(), all)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout after an interrupt: %q", stdout.String())
	}
	committed := strings.Count(all, " committed: ")
	replays := int(testdb.Count(t, b.pool, "job_replays"))
	if committed < 1 || committed >= len(ids) || replays != committed {
		t.Fatalf("%d chunks logged, %d lineage rows, of %d sources\n%s", committed, replays, len(ids), all)
	}
	last := got[len(got)-1]
	resume := "to resume, run the same command again: runledger " + strings.Join(args, " ")
	if !strings.Contains(last, "interrupted") || !strings.HasSuffix(last, resume) || !strings.Contains(last, fmt.Sprintf("%d chunk", committed)) {
		t.Fatalf("last stderr line %q, want the interrupt, the chunks kept and %q", last, resume)
	}
	if !strings.Contains(all, "the current chunk finishes and commits") {
		t.Errorf("no notice of the interrupt:\n%s", all)
	}

	// Resuming: the same command, without the throttle, under --json.
	out := c.ok(t, b.env, append(args[:len(args)-2], "--json")...)
	if w := bulkSummaryLine(false, 5, 5-committed, committed, 0, 0, 0, 0, 0) + "\n"; out.stdout != w {
		t.Errorf("resume: %s, want %s", out.stdout, w)
	}
	if n := testdb.Scalar[int64](t, b.pool, `SELECT count(DISTINCT source_job_id) FROM job_replays WHERE replay_request_key = 'k'`); n != 5 || testdb.Count(t, b.pool, "job_replays") != 5 {
		t.Errorf("after resuming: %d sources replayed, %d lineage rows; want 5 and 5", n, testdb.Count(t, b.pool, "job_replays"))
	}
}

// testReplayBulkHelp: the help documents the selection, the shapes and
// exit code 6.
func testReplayBulkHelp(t *testing.T, c *cli) {
	out := c.ok(t, env{}, "help", "replay-bulk")
	for _, w := range []string{
		"Usage:\n  runledger replay-bulk --key K --reason R [--from FILE] [--type T] [--org UUID]",
		`{"outcome":"bulk_replay","dry_run":false,"selected":N`, `"replay_job_id"`, "Ctrl-C", "resume", "6 at least one was refused",
		"--succeeded-since TIME", "--succeeded-until TIME", "--limit N", "--chunk N", "--rate N", "--dry-run", "--details",
	} {
		if !strings.Contains(out.stdout, w) {
			t.Errorf("help lacks %q", w)
		}
	}
	if !strings.Contains(c.ok(t, env{}, "help").stdout, "\n  6  ") {
		t.Errorf("overview does not explain exit code 6")
	}
}
