package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/failpoint"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/internal/txn"
)

func requeueSummaryLine(dryRun bool, selected, requeued, existing, mismatch, notFound, workflow, notQuiesced int) string {
	return fmt.Sprintf(`{"outcome":"bulk_requeue","dry_run":%t,"selected":%d,"requeued":%d,"existing":%d,"mismatch":%d,"not_found":%d,"workflow_managed":%d,"not_quiesced":%d}`,
		dryRun, selected, requeued, existing, mismatch, notFound, workflow, notQuiesced)
}

// seedDead inserts n DEAD_LETTERED jobs of typ at run 1 in scope, with
// error code code, finished an hour ago (one microsecond apart), and
// returns their ids in finish order.
func seedDead(t *testing.T, pool *pgxpool.Pool, typ, code string, scope runledger.Scope, n int) []uuid.UUID {
	t.Helper()
	testdb.DefineType(t, pool, typ)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	testdb.Exec(t, pool, `
		INSERT INTO job_queue (id, job_type, organization_id, status, run_number, attempt, max_attempts, stage, last_error_code, finished_at)
		SELECT id, $2, $3, 'DEAD_LETTERED', 1, 1, 1, 'running', $4, now() - interval '1 hour' + make_interval(secs => ord / 1e6)
		FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)`, ids, typ, testdb.Tenant(scope), code)
	return ids
}

func pendingCount(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	return testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue WHERE status = 'PENDING'`)
}

// testRequeueBulk: bad input exits 2 and writes nothing; a list requeues,
// reports refusals with exit 6 and details, and resumes as existing; a
// filter selects by status, type, error code and scope; a dry run writes
// nothing.
func testRequeueBulk(t *testing.T, c *cli) {
	b := newBulkDB(t)
	org := uuid.New()
	ids := seedDead(t, b.pool, "charge.capture", "provider.down", runledger.Organization(org), 5)
	seedDead(t, b.pool, "charge.capture", "card.declined", runledger.Organization(org), 2)
	seedDead(t, b.pool, "charge.capture", "provider.down", runledger.Global(), 3)
	before := b.tables(t)

	good := writeList(t, "# incident 42", ids[0].String()+" DEAD_LETTERED 1", "", ids[1].String()+" dead_lettered 1")
	for name, args := range map[string][]string{
		"no selection":        {"requeue-bulk", "--reason", "r"},
		"two selections":      {"requeue-bulk", "--reason", "r", "--from", good, "--status", "DEAD_LETTERED"},
		"filter flag w/ from": {"requeue-bulk", "--reason", "r", "--from", good, "--type", "x"},
		"filter w/o status":   {"requeue-bulk", "--reason", "r", "--type", "x"},
		"succeeded status":    {"requeue-bulk", "--reason", "r", "--status", "SUCCEEDED"},
		"blank reason":        {"requeue-bulk", "--reason", " ", "--from", good},
		"chunk 0":             {"requeue-bulk", "--reason", "r", "--from", good, "--chunk", "0"},
		"rate 0":              {"requeue-bulk", "--reason", "r", "--from", good, "--rate", "0"},
		"limit 0":             {"requeue-bulk", "--reason", "r", "--status", "CANCELED", "--limit", "0"},
		"range":               {"requeue-bulk", "--reason", "r", "--status", "CANCELED", "--finished-since", "2026-01-02T00:00:00Z", "--finished-until", "2026-01-01T00:00:00Z"},
		"bad line":            {"requeue-bulk", "--reason", "r", "--from", writeList(t, ids[0].String()+" DEAD_LETTERED 1", ids[1].String()+" SUCCEEDED 1")},
		"duplicate":           {"requeue-bulk", "--reason", "r", "--from", writeList(t, ids[0].String()+" DEAD_LETTERED 1", ids[0].String()+" CANCELED 1")},
		"empty":               {"requeue-bulk", "--reason", "r", "--from", writeList(t, "# nothing")},
	} {
		out := c.want(t, 2, b.env, append(args, "--json")...)
		wantError(t, out, "validation")
		if name == "bad line" && !strings.Contains(out.stderr, "line 2") {
			t.Errorf("%s: %s", name, out.stderr)
		}
	}
	if after := b.tables(t); after != before {
		t.Fatalf("bad input wrote: %v -> %v", before, after)
	}

	// A list with a refused job: exit 6, details, the summary last.
	list := writeList(t, ids[0].String()+" DEAD_LETTERED 1", ids[1].String()+" DEAD_LETTERED 1", ids[2].String()+" DEAD_LETTERED 2",
		uuid.NewString()+" CANCELED 1")
	args := []string{"requeue-bulk", "--reason", "provider back", "--org", org.String(), "--from", list, "--chunk", "2", "--json", "--details"}
	out := c.want(t, 6, b.env, args...)
	lines := jsonLines(t, out.stdout)
	if len(lines) != 5 || lines[4] != requeueSummaryLine(false, 4, 2, 0, 1, 1, 0, 0) {
		t.Fatalf("stdout:\n%s", out.stdout)
	}
	d := object(t, lines[0])
	wantKeys(t, "detail", d, "job_id", "run_number", "result")
	if str(t, d, "job_id") != ids[0].String() || num(t, d, "run_number") != 1 || str(t, d, "result") != "requeued" ||
		str(t, object(t, lines[2]), "result") != "mismatch" || str(t, object(t, lines[3]), "result") != "not_found" {
		t.Fatalf("details:\n%s", out.stdout)
	}
	// The same command again: existing for what it requeued.
	again := c.want(t, 6, b.env, args[:len(args)-1]...)
	if strings.TrimSpace(again.stdout) != requeueSummaryLine(false, 4, 0, 2, 1, 1, 0, 0) {
		t.Fatalf("rerun: %s", again.stdout)
	}

	// A filter: the organization's provider.down jobs not yet requeued; a
	// dry run first.
	filter := []string{"requeue-bulk", "--reason", "provider back", "--org", org.String(), "--status", "DEAD_LETTERED", "--type", "charge.capture",
		"--error-code", "provider.down", "--json"}
	tables := b.tables(t)
	dry := c.ok(t, b.env, append(filter, "--dry-run")...)
	if strings.TrimSpace(dry.stdout) != requeueSummaryLine(true, 3, 3, 0, 0, 0, 0, 0) || b.tables(t) != tables {
		t.Fatalf("dry run: %s", dry.stdout)
	}
	f := c.ok(t, b.env, filter...)
	if strings.TrimSpace(f.stdout) != requeueSummaryLine(false, 3, 3, 0, 0, 0, 0, 0) || pendingCount(t, b.pool) != 5 {
		t.Fatalf("filter: %s (%d pending)", f.stdout, pendingCount(t, b.pool))
	}
	// Text form, and a filter that selects nothing: exit 0.
	txt := c.ok(t, b.env, filter[:len(filter)-1]...)
	if !strings.Contains(txt.stdout, "No job selected") || !strings.Contains(txt.stderr, "") {
		t.Fatalf("text: %s", txt.stdout)
	}
}

// TestRequeueBulkFirstInterruptLetsTheChunkCommit interrupts requeue-bulk
// before its second chunk's COMMIT, as Ctrl-C does: that chunk commits,
// the action stops with exit 1 and prints the resume command with the
// bound it pinned, and the resume command finishes it.
func TestRequeueBulkFirstInterruptLetsTheChunkCommit(t *testing.T) {
	url := testdb.NewURL(t)
	pool := testdb.OpenPool(t, url, 2, nil)
	seedDead(t, pool, "charge.capture", "provider.down", runledger.Global(), 6)
	sigs := fakeSignals(t)
	base, cancel := context.WithCancel(context.WithValue(testdb.Context(t), interruptMarker{}, true))
	defer cancel()
	var stdout, stderr syncBuffer
	mine := func(ctx context.Context) bool { return ctx.Value(interruptMarker{}) != nil }
	commits := 0
	defer failpoint.EnableFor(txn.FailpointBeforeCommit, func(ctx context.Context, arg any) {
		if !mine(ctx) || !strings.Contains(arg.(txn.FailpointCall).Op, "bulk job requeue") {
			return
		}
		if commits++; commits != 2 {
			return
		}
		cancel()
		sigs <- os.Interrupt
		testdb.WaitFor(t, "the first interrupt's notice", func() bool {
			return strings.Contains(stderr.String(), "interrupted: the current chunk finishes and commits")
		})
	}, mine)()

	code := runIn(base, url, &stdout, &stderr, "requeue-bulk", "--status", "DEAD_LETTERED", "--reason", "r", "--chunk", "2")
	if code != exitError {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if n := pendingCount(t, pool); n != 4 {
		t.Fatalf("%d requeued after the interrupt, want 4\nstderr: %s", n, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	_, resume, ok := strings.Cut(last, ": runledger ")
	if !strings.Contains(last, "interrupted") || !ok || !strings.Contains(resume, "--finished-until ") {
		t.Fatalf("last stderr line %q: want the interrupt and the resume command with --finished-until", last)
	}
	// A job that dead-letters now is after the pinned bound.
	late := seedDead(t, pool, "charge.capture", "provider.down", runledger.Global(), 1)
	testdb.Exec(t, pool, `UPDATE job_queue SET finished_at = now() + interval '1 second' WHERE id = $1`, late[0])
	var out, errOut syncBuffer
	if code := runIn(testdb.Context(t), url, &out, &errOut, append(strings.Fields(resume), "--json")...); code != exitOK {
		t.Fatalf("resume %q: exit %d\n%s", resume, code, errOut.String())
	}
	if got := strings.TrimSpace(out.String()); got != requeueSummaryLine(false, 2, 2, 0, 0, 0, 0, 0) || pendingCount(t, pool) != 6 {
		t.Fatalf("resume: %s", got)
	}
}
