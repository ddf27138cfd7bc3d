package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/testdb"
)

// deadLetter enqueues a job of typ (one attempt) and fails it under its
// lease, with error code code: DEAD_LETTERED at run 1. org may be "".
func (c *cli) deadLetter(t *testing.T, e env, typ, org, code string) string {
	t.Helper()
	args := []string{"--type", typ, "--payload", `{"charge":"ch_1"}`, "--max-attempts", "1"}
	if org != "" {
		args = append(args, "--org", org)
	}
	id := str(t, c.enqueue(t, e, args...), "id")
	claimed := list(t, object(t, c.ok(t, e, "claim", "--worker", "w-"+typ, "--type", typ, "--json").stdout), "jobs")
	if len(claimed) != 1 || str(t, claimed[0], "id") != id {
		t.Fatalf("claim returned %v, want job %s", claimed, id)
	}
	c.ok(t, e, "fail", "--job", id, "--run", "1", "--attempt", "1", "--worker", "w-"+typ, "--error-code", code)
	return id
}

func testRequeue(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "charge.capture")
	org := uuid.NewString()
	id := c.deadLetter(t, e, "charge.capture", org, "provider.down")

	// Usage: a status that cannot be requeued names replay.
	for _, st := range []string{"SUCCEEDED", "PENDING", "nope"} {
		out := c.want(t, 2, e, "requeue", "--job", id, "--status", st, "--run", "1", "--reason", "r", "--org", org, "--json")
		if code := wantError(t, out, "validation"); code != "cli.usage" || !strings.Contains(out.stderr, "replayed") {
			t.Fatalf("--status %s: %s %s", st, code, out.stderr)
		}
	}
	if code := wantError(t, c.want(t, 2, e, "requeue", "--job", id, "--status", "DEAD_LETTERED", "--run", "1", "--reason", " ", "--json"), "validation"); code != "job.requeue_reason_blank" {
		t.Fatalf("blank reason: %s", code)
	}

	// Another tenant: not found (exit 4).
	nf := object(t, c.want(t, 4, e, "requeue", "--job", id, "--status", "DEAD_LETTERED", "--run", "1", "--reason", "r", "--json").stdout)
	wantKeys(t, "not found", nf, "outcome")
	// A wrong run: a mismatch (exit 3) showing the job.
	mm := object(t, c.want(t, 3, e, "requeue", "--job", id, "--status", "DEAD_LETTERED", "--run", "2", "--reason", "r", "--org", org, "--json").stdout)
	wantKeys(t, "mismatch", mm, "outcome", "actual")
	if str(t, mm, "outcome") != "expectation_mismatch" || str(t, sub(t, mm, "actual"), "status") != "DEAD_LETTERED" {
		t.Fatalf("mismatch = %v", mm)
	}

	// The requeue.
	args := []string{"requeue", "--job", id, "--status", "DEAD_LETTERED", "--run", "1", "--reason", "provider back", "--org", org, "--json"}
	r := object(t, c.ok(t, e, args...).stdout)
	wantKeys(t, "requeued", r, "outcome", "disposition", "job_id", "before", "after", "event_id")
	before, after := sub(t, r, "before"), sub(t, r, "after")
	wantJob(t, "before", before)
	wantJob(t, "after", after)
	if str(t, r, "outcome") != "requeued" || str(t, r, "disposition") != "inserted" || str(t, r, "job_id") != id || num(t, r, "event_id") < 1 ||
		str(t, before, "status") != "DEAD_LETTERED" || str(t, after, "status") != "PENDING" || num(t, after, "run_number") != 2 ||
		num(t, after, "attempt") != 0 || str(t, after, "status_reason") != "provider back" || !isNull(after, "last_error_code") {
		t.Fatalf("requeued = %v", r)
	}
	// The same request: existing, before and event_id null.
	again := object(t, c.ok(t, e, args...).stdout)
	wantKeys(t, "existing", again, "outcome", "disposition", "job_id", "before", "after", "event_id")
	if str(t, again, "disposition") != "existing" || !isNull(again, "before") || !isNull(again, "event_id") || num(t, sub(t, again, "after"), "run_number") != 2 {
		t.Fatalf("existing = %v", again)
	}
	// Human form.
	if out := c.ok(t, e, args[:len(args)-1]...); !strings.Contains(out.stdout, "Requeued (existing)") {
		t.Fatalf("text: %s", out.stdout)
	}

	// jobs show lists the requeue history.
	show := object(t, c.ok(t, e, "jobs", "show", id, "--org", org, "--json").stdout)
	hist := list(t, show, "requeues")
	if len(hist) != 1 || num(t, hist[0], "from_run_number") != 1 || str(t, hist[0], "reason") != "provider back" {
		t.Fatalf("requeues = %s", show["requeues"])
	}
	wantUTC(t, hist[0], "requeued_at")
	if out := c.ok(t, e, "jobs", "show", id, "--org", org); !strings.Contains(out.stdout, "provider back") || !strings.Contains(out.stdout, "requeued") {
		t.Fatalf("jobs show text: %s", out.stdout)
	}

	// A canceled job whose lease is live: not quiesced (exit 7).
	c.define(t, e, "refund")
	lid := str(t, c.enqueue(t, e, "--type", "refund"), "id")
	c.ok(t, e, "claim", "--worker", "w9", "--type", "refund", "--lease", "5m")
	conn := testdb.Connect(t, e.databaseURL)
	if _, err := conn.Exec(testdb.Context(t), `UPDATE job_queue SET status = 'CANCELED', finished_at = now() WHERE id = $1`, lid); err != nil {
		t.Fatal(err)
	}
	nq := object(t, c.want(t, 7, e, "requeue", "--job", lid, "--status", "canceled", "--run", "1", "--reason", "r", "--json").stdout)
	wantKeys(t, "not quiesced", nq, "outcome", "actual", "retry_after")
	if str(t, nq, "outcome") != "cancellation_not_quiesced" {
		t.Fatalf("not quiesced = %v", nq)
	}
	wantUTC(t, nq, "retry_after")
	var raw json.RawMessage = nq["actual"]
	if len(raw) == 0 {
		t.Fatal("no actual")
	}
}
