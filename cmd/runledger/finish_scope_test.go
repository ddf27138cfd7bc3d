package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// testFinishScope: complete and fail with --org find only jobs of that
// organization (another tenant's job exits 4 and is left as it was), work
// on the caller's own jobs, and keep the unscoped lease path without
// --org; no error of either, text or --json, names the worker holding the
// job, and an unscoped mismatch does not show the job's status.
func testFinishScope(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "t")
	orgA, orgB := uuid.NewString(), uuid.NewString()
	holder := "holder-" + uuid.NewString()[:8]
	jobA := str(t, c.enqueue(t, e, "--type", "t", "--org", orgA), "id")
	global := str(t, c.enqueue(t, e, "--type", "t"), "id")
	if got := list(t, object(t, c.ok(t, e, "claim", "--worker", holder, "--type", "t", "--limit", "2", "--json").stdout), "jobs"); len(got) != 2 {
		t.Fatalf("claimed %v, want both jobs", got)
	}
	lease := func(verb, job, worker string, extra ...string) []string {
		return append([]string{verb, "--job", job, "--run", "1", "--attempt", "1", "--worker", worker}, extra...)
	}
	// state is what a refused command must leave unchanged: the job's
	// status and its number of events, read in the job's own scope.
	state := func(job string, org ...string) string {
		v := object(t, c.ok(t, e, append([]string{"jobs", "show", job, "--json"}, org...)...).stdout)
		return fmt.Sprintf("%s, %d events", str(t, sub(t, v, "job"), "status"), len(list(t, v, "events")))
	}
	// noHolder fails if a refused command's stderr names the holder.
	noHolder := func(what string, out outcome) {
		t.Helper()
		if strings.Contains(out.stderr, holder) || strings.Contains(out.stdout, holder) {
			t.Fatalf("%s: the error names the holding worker:\n%s", what, out.stderr)
		}
	}

	// Another tenant's job, or a global one, is not found with --org,
	// with the right lease or a wrong one.
	beforeA, beforeG := state(jobA, "--org", orgA), state(global)
	for _, args := range [][]string{
		lease("complete", jobA, holder, "--org", orgB),
		lease("fail", jobA, holder, "--org", orgB),
		lease("complete", jobA, "intruder", "--org", orgB),
		lease("complete", global, holder, "--org", orgA),
		lease("fail", global, holder, "--org", orgA, "--terminal"),
	} {
		out := c.want(t, 4, e, args...)
		wantOneLine(t, out.stderr)
		if !strings.Contains(out.stderr, "job.not_found") {
			t.Fatalf("runledger %v: %s", args, out.stderr)
		}
		noHolder(strings.Join(args, " "), out)
		jsonOut := c.want(t, 4, e, append(args, "--json")...)
		if code := wantError(t, jsonOut, "not_found"); code != "job.not_found" {
			t.Fatalf("runledger %v --json: code %s", args, code)
		}
		noHolder(strings.Join(args, " ")+" --json", jsonOut)
	}
	if a, g := state(jobA, "--org", orgA), state(global); a != beforeA || g != beforeG {
		t.Fatalf("refused finishes changed the jobs: %s -> %s, %s -> %s", beforeA, a, beforeG, g)
	}

	// A mismatch never names the holder; unscoped it does not show the
	// job's status either, scoped (in scope) it does.
	for _, args := range [][]string{
		lease("complete", jobA, "intruder"),
		lease("fail", global, "intruder"),
	} {
		out := c.want(t, 3, e, args...)
		noHolder(strings.Join(args, " "), out)
		if !strings.Contains(out.stderr, "job.lease_mismatch") || strings.Contains(out.stderr, "LEASED") {
			t.Fatalf("unscoped mismatch: want job.lease_mismatch without the job's status: %s", out.stderr)
		}
		jsonOut := c.want(t, 3, e, append(args, "--json")...)
		if code := wantError(t, jsonOut, "conflict"); code != "job.lease_mismatch" {
			t.Fatalf("code = %s", code)
		}
		noHolder(strings.Join(args, " ")+" --json", jsonOut)
	}
	scoped := lease("fail", jobA, "intruder", "--org", orgA)
	out := c.want(t, 3, e, scoped...)
	noHolder("scoped mismatch", out)
	if !strings.Contains(out.stderr, "job is LEASED at run 1 attempt 1") {
		t.Fatalf("scoped mismatch does not show the job's state: %s", out.stderr)
	}
	jsonOut := c.want(t, 3, e, append(scoped, "--json")...)
	if code := wantError(t, jsonOut, "conflict"); code != "job.lease_mismatch" {
		t.Fatalf("code = %s", code)
	}
	noHolder("scoped mismatch --json", jsonOut)
	if a, g := state(jobA, "--org", orgA), state(global); a != beforeA || g != beforeG {
		t.Fatalf("refused finishes changed the jobs: %s -> %s, %s -> %s", beforeA, a, beforeG, g)
	}

	// In its own scope the holder completes; without --org it fails the
	// global job as before. The JSON shape is the same either way.
	done := object(t, c.ok(t, e, append(lease("complete", jobA, holder, "--org", orgA), "--output", `{"ok":true}`, "--json")...).stdout)
	wantKeys(t, "complete", done, "job")
	if j := sub(t, done, "job"); str(t, j, "status") != "SUCCEEDED" || str(t, j, "organization_id") != orgA {
		t.Fatalf("scoped complete = %v", j)
	}
	failed := object(t, c.ok(t, e, append(lease("fail", global, holder), "--terminal", "--json")...).stdout)
	wantKeys(t, "fail", failed, "job")
	if j := sub(t, failed, "job"); str(t, j, "status") != "DEAD_LETTERED" || !isNull(j, "organization_id") {
		t.Fatalf("unscoped fail = %v", j)
	}
	// A finished job: the mismatch names neither its last worker nor, in
	// scope, anything but its own state.
	out = c.want(t, 3, e, lease("complete", jobA, "intruder", "--org", orgA)...)
	noHolder("mismatch on a finished job", out)
	if !strings.Contains(out.stderr, "job is SUCCEEDED at run 1 attempt 1") {
		t.Fatalf("scoped mismatch on a finished job: %s", out.stderr)
	}
}
