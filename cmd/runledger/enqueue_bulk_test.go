package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/testdb"
)

// testEnqueueBulk: a bad line exits 2 naming it and writes nothing (with
// an unreachable database too: the input is checked first); a good input
// enqueues every line, reports each with --details in input order, and
// exits 6 when a line was refused; rerun, keyed lines are existing; stdin
// works alike.
func testEnqueueBulk(t *testing.T, c *cli) {
	b := newBulkDB(t)
	testdb.DefineType(t, b.pool, "email")
	org := uuid.New()
	before := b.tables(t)
	unreachable, _ := unreachableURL(t)

	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"array":         {[]string{`{"type":"email"}`, `{"type":"email","idempotency_key":"a"}`, `[1]`}, "line 3"},
		"not json":      {[]string{`{"type":"email"}`, `nope`}, "line 2"},
		"unknown field": {[]string{`{"type":"email","idempotencyKey":"a"}`}, "line 1"},
		"bad org":       {[]string{``, `{"type":"email","org":"x"}`}, "line 2"},
		"wrong type":    {[]string{`{"type":"email","priority":"high"}`}, "line 1"},
	} {
		path := writeList(t, tc.lines...)
		for _, e := range []env{b.env, {databaseURL: unreachable}} {
			out := c.want(t, 2, e, "enqueue-bulk", "--from", path, "--json")
			wantError(t, out, "validation")
			if !strings.Contains(out.stderr, tc.want) {
				t.Errorf("%s: message %s does not name %s", name, out.stderr, tc.want)
			}
		}
	}
	if after := b.tables(t); after != before {
		t.Fatalf("bad input wrote: %v -> %v", before, after)
	}

	path := writeList(t,
		`{"type":"email","idempotency_key":"a","payload":{"to":"x@example.com"}}`,
		``,
		`{"type":"email","idempotency_key":"a","payload":{"to":"y@example.com"}}`,
		`{"type":"missing"}`,
		`{"type":"email","max_attempts":0}`,
		fmt.Sprintf(`{"type":"email","org":%q,"idempotency_key":"a","run_at":"2999-01-01T00:00:00Z"}`, org),
		`{"type":"email"}`,
	)
	out := c.want(t, 6, b.env, "enqueue-bulk", "--from", path, "--details", "--json")
	lines := jsonLines(t, out.stdout)
	if len(lines) != 7 {
		t.Fatalf("%d output lines, want 6 details and a summary:\n%s", len(lines), out.stdout)
	}
	wantResults := []struct {
		line   int
		result string
	}{{1, "inserted"}, {3, "conflict"}, {4, "definition_unavailable"}, {5, "invalid"}, {6, "inserted"}, {7, "inserted"}}
	for i, w := range wantResults {
		var d struct {
			Line   int        `json:"line"`
			Result string     `json:"result"`
			JobID  *uuid.UUID `json:"job_id"`
			Error  *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &d); err != nil {
			t.Fatal(err)
		}
		refused := w.result != "inserted" && w.result != "existing"
		if d.Line != w.line || d.Result != w.result || (d.JobID == nil) != refused || (d.Error == nil) == refused {
			t.Errorf("detail %d: %s, want line %d %s", i, lines[i], w.line, w.result)
		}
	}
	if want := `{"outcome":"enqueue_bulk","requested":6,"inserted":3,"existing":0,"refused":3}`; lines[6] != want {
		t.Errorf("summary %s, want %s", lines[6], want)
	}
	if n := testdb.Count(t, b.pool, "job_queue"); n != 3 {
		t.Fatalf("%d jobs, want 3", n)
	}
	if n := testdb.Scalar[int64](t, b.pool, `SELECT count(*) FROM job_queue WHERE organization_id = $1 AND stage = 'scheduled'`, org); n != 1 {
		t.Fatalf("%d scheduled jobs of the line's org, want 1", n)
	}

	// Keyed lines again, from stdin: the global key "a" is existing; with
	// --org for lines without one, the org's key "a" holds another
	// request (the scheduled one): a conflict, exit 6.
	stdin := "{\"type\":\"email\",\"idempotency_key\":\"a\",\"payload\":{\"to\":\"x@example.com\"}}\r\n" +
		"{\"type\":\"email\",\"idempotency_key\":\"b\"}\n"
	out = c.runStdin(t, b.env, stdin, "enqueue-bulk", "--from", "-", "--json")
	if out.code != 0 || strings.TrimSpace(out.stdout) != `{"outcome":"enqueue_bulk","requested":2,"inserted":1,"existing":1,"refused":0}` {
		t.Fatalf("stdin rerun: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = c.runStdin(t, b.env, stdin, "enqueue-bulk", "--from", "-", "--org", org.String())
	if out.code != 6 || strings.TrimSpace(out.stdout) != "Requested 2: 1 inserted, 0 existing, 1 refused." {
		t.Fatalf("stdin with --org: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = c.runStdin(t, b.env, "{\"type\":\"email\"}\n[]\n", "enqueue-bulk", "--from", "-", "--json")
	if out.code != 2 || !strings.Contains(out.stderr, "stdin line 2") {
		t.Fatalf("bad stdin line: exit %d\n%s", out.code, out.stderr)
	}
	if n := testdb.Count(t, b.pool, "job_queue"); n != 5 {
		t.Fatalf("%d jobs, want 5", n)
	}
}

// testDefinitionsPause: pause and resume print the outcome; a paused
// type's jobs are not claimed but are enqueued; resumed, they are claimed;
// an unknown type is not found (exit 4), a blank one invalid (exit 2).
func testDefinitionsPause(t *testing.T, c *cli) {
	e := db(t)
	c.ok(t, e, "definitions", "upsert", "--type", "email")
	out := c.ok(t, e, "definitions", "pause", "--type", "email", "--json")
	if got := strings.TrimSpace(out.stdout); got != `{"outcome":"definition","job_type":"email","paused":true}` {
		t.Fatalf("pause: %s", got)
	}
	job := c.enqueue(t, e, "--type", "email")
	claim := object(t, c.ok(t, e, "claim", "--worker", "w", "--json").stdout)
	show := object(t, c.ok(t, e, "jobs", "show", str(t, job, "id"), "--json").stdout)
	if string(show["job_type_paused"]) != "true" {
		t.Fatalf("jobs show of a paused type's job: %v", keys(show))
	}
	if out := c.ok(t, e, "jobs", "show", str(t, job, "id")); !strings.Contains(out.stdout, "Job type email is paused") {
		t.Fatalf("jobs show text: %s", out.stdout)
	}
	if string(claim["jobs"]) != "[]" {
		t.Fatalf("claim of a paused type: %v", claim)
	}
	if out := c.ok(t, e, "definitions", "upsert", "--type", "email"); !strings.Contains(out.stdout, "enabled, paused,") {
		t.Fatalf("definition text does not say paused: %s", out.stdout)
	}
	out = c.ok(t, e, "definitions", "resume", "--type", "email", "--json")
	if got := strings.TrimSpace(out.stdout); got != `{"outcome":"definition","job_type":"email","paused":false}` {
		t.Fatalf("resume: %s", got)
	}
	if out := c.ok(t, e, "definitions", "resume", "--type", "email"); !strings.Contains(out.stdout, "email is not paused") {
		t.Fatalf("resume text: %s", out.stdout)
	}
	if show := object(t, c.ok(t, e, "jobs", "show", str(t, job, "id"), "--json").stdout); show["job_type_paused"] != nil {
		t.Fatalf("jobs show after resume: %v", keys(show))
	}
	claim = object(t, c.ok(t, e, "claim", "--worker", "w", "--json").stdout)
	if string(claim["jobs"]) == "[]" {
		t.Fatalf("claim after resume found nothing: %v", claim)
	}
	wantError(t, c.want(t, 4, e, "definitions", "pause", "--type", "nope", "--json"), "not_found")
	wantError(t, c.want(t, 2, e, "definitions", "resume", "--type", " ", "--json"), "validation")
}

// testEnqueueBulkBatches: an input over one batch (10,001 lines) is
// enqueued in two batches, reported line by line in input order; run
// again, every keyed line is existing.
func testEnqueueBulkBatches(t *testing.T, c *cli) {
	b := newBulkDB(t)
	testdb.DefineType(t, b.pool, "email")
	lines := make([]string, 10_001)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"type":"email","idempotency_key":"k%d"}`, i)
	}
	path := writeList(t, lines...)
	out := c.want(t, 0, b.env, "enqueue-bulk", "--from", path, "--json", "--details")
	got := jsonLines(t, out.stdout)
	if len(got) != len(lines)+1 || !strings.HasPrefix(got[len(lines)-1], `{"line":10001,"result":"inserted"`) {
		t.Fatalf("%d output lines, the last detail %s", len(got), got[len(got)-2])
	}
	if want := `{"outcome":"enqueue_bulk","requested":10001,"inserted":10001,"existing":0,"refused":0}`; got[len(got)-1] != want {
		t.Fatalf("summary %s", got[len(got)-1])
	}
	out = c.want(t, 0, b.env, "enqueue-bulk", "--from", path, "--json")
	if want := `{"outcome":"enqueue_bulk","requested":10001,"inserted":0,"existing":10001,"refused":0}`; strings.TrimSpace(out.stdout) != want {
		t.Fatalf("rerun: %s", out.stdout)
	}
	if n := testdb.Count(t, b.pool, "job_queue"); n != 10_001 {
		t.Fatalf("%d jobs", n)
	}
}
