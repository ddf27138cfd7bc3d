package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/runledger-go/runledger/internal/testdb"
)

func testMigrate(t *testing.T, c *cli) {
	e := env{databaseURL: emptyDB(t)}

	v := object(t, c.ok(t, e, "migrate", "version", "--json").stdout)
	wantKeys(t, "version", v, "version", "latest")
	latest := num(t, v, "latest")
	if num(t, v, "version") != 0 || latest < 4 {
		t.Fatalf("empty database: %v", v)
	}

	st := object(t, c.ok(t, e, "migrate", "status", "--json").stdout)
	wantKeys(t, "status", st, "version", "migrations")
	migs := list(t, st, "migrations")
	if int64(len(migs)) != latest {
		t.Fatalf("%d migrations, want %d", len(migs), latest)
	}
	for i, m := range migs {
		wantKeys(t, "migration", m, "version", "source", "state", "applied_at")
		if num(t, m, "version") != int64(i+1) || str(t, m, "state") != "pending" || !isNull(m, "applied_at") {
			t.Fatalf("migration %d on an empty database: %v", i, m)
		}
		if !strings.HasPrefix(str(t, m, "source"), fmt.Sprintf("%05d_", i+1)) || !strings.HasSuffix(str(t, m, "source"), ".sql") {
			t.Fatalf("source = %s", m["source"])
		}
	}
	if str(t, migs[0], "source") != "00001_job_ledger.sql" {
		t.Fatalf("first source = %s", migs[0]["source"])
	}

	down := object(t, c.ok(t, e, "migrate", "down", "--json").stdout)
	wantKeys(t, "down at 0", down, "rolled_back", "version")
	if !isNull(down, "rolled_back") || num(t, down, "version") != 0 {
		t.Fatalf("down at version 0: %v", down)
	}

	up := object(t, c.ok(t, e, "migrate", "up", "--json").stdout)
	wantKeys(t, "up", up, "applied", "version")
	applied := list(t, up, "applied")
	if int64(len(applied)) != latest || num(t, up, "version") != latest {
		t.Fatalf("up: %v", up)
	}
	for i, a := range applied {
		wantKeys(t, "applied", a, "version", "source", "duration_ms")
		if num(t, a, "version") != int64(i+1) || num(t, a, "duration_ms") < 0 {
			t.Fatalf("applied[%d] = %v", i, a)
		}
	}
	again := object(t, c.ok(t, e, "migrate", "up", "--json").stdout)
	if len(list(t, again, "applied")) != 0 || num(t, again, "version") != latest {
		t.Fatalf("second up: %v", again)
	}
	if out := c.ok(t, e, "migrate", "up"); !strings.Contains(out.stdout, "Nothing to apply") {
		t.Fatalf("second up, text: %s", out.stdout)
	}

	st = object(t, c.ok(t, e, "migrate", "status", "--json").stdout)
	if num(t, st, "version") != latest {
		t.Fatalf("status after up: %v", st)
	}
	for _, m := range list(t, st, "migrations") {
		if str(t, m, "state") != "applied" {
			t.Fatalf("after up: %v", m)
		}
		wantUTC(t, m, "applied_at")
	}

	down = object(t, c.ok(t, e, "migrate", "down", "--json").stdout)
	rb := sub(t, down, "rolled_back")
	wantKeys(t, "rolled_back", rb, "version", "source")
	if num(t, rb, "version") != latest || num(t, down, "version") != latest-1 || str(t, rb, "source") != str(t, migs[latest-1], "source") {
		t.Fatalf("down: %v", down)
	}
	v = object(t, c.ok(t, e, "migrate", "version", "--json").stdout)
	if num(t, v, "version") != latest-1 || num(t, v, "latest") != latest {
		t.Fatalf("version after down: %v", v)
	}
	out := c.ok(t, e, "migrate", "status")
	if !strings.Contains(out.stdout, "pending") || !strings.Contains(out.stdout, fmt.Sprintf("version %d of %d", latest-1, latest)) {
		t.Fatalf("status text after down:\n%s", out.stdout)
	}
	out = c.ok(t, e, "migrate", "up")
	if !strings.Contains(out.stdout, "Applied "+str(t, migs[latest-1], "source")) {
		t.Fatalf("up text:\n%s", out.stdout)
	}
	out = c.ok(t, e, "migrate", "version")
	if !strings.Contains(out.stdout, fmt.Sprintf("version %d, the latest", latest)) {
		t.Fatalf("version text: %s", out.stdout)
	}
	// The database works after the round trip.
	c.define(t, e, "after_migrate")
}

func testDefinitionsUpsert(t *testing.T, c *cli) {
	e := db(t)
	out := c.ok(t, e, "definitions", "upsert", "--type", "send_invoice", "--max-attempts", "3", "--timeout-seconds", "60", "--priority", "-5", "--json")
	d := sub(t, object(t, out.stdout), "definition")
	wantKeys(t, "definition", d, "job_type", "version", "max_attempts", "default_timeout_seconds", "default_priority", "enabled", "paused", "created_at", "updated_at")
	if str(t, d, "job_type") != "send_invoice" || num(t, d, "version") != 1 || num(t, d, "max_attempts") != 3 ||
		num(t, d, "default_timeout_seconds") != 60 || num(t, d, "default_priority") != -5 || string(d["enabled"]) != "true" {
		t.Fatalf("definition = %v", d)
	}
	wantUTC(t, d, "created_at")
	wantUTC(t, d, "updated_at")

	// Flags left out keep the stored values; a change bumps the version.
	d = sub(t, object(t, c.ok(t, e, "definitions", "upsert", "--type", "send_invoice", "--enabled=false", "--json").stdout), "definition")
	if num(t, d, "version") != 2 || string(d["enabled"]) != "false" || num(t, d, "max_attempts") != 3 || num(t, d, "default_priority") != -5 {
		t.Fatalf("after disabling: %v", d)
	}
	// A disabled type refuses enqueues: a validation error, exit 2.
	if code := wantError(t, c.want(t, 2, e, "enqueue", "--type", "send_invoice", "--json"), "validation"); code != "job.definition_not_found_or_disabled" {
		t.Fatalf("enqueue of a disabled type: %s", code)
	}
	d = sub(t, object(t, c.ok(t, e, "definitions", "upsert", "--type", "send_invoice", "--enabled", "true", "--enabled", "false", "--json").stdout), "definition")
	if string(d["enabled"]) != "false" || num(t, d, "version") != 2 {
		t.Fatalf("--enabled false (space-separated): %v", d)
	}
	out = c.ok(t, e, "definitions", "upsert", "--type", "send_invoice", "--enabled")
	if !strings.Contains(out.stdout, "send_invoice, version 3: enabled, max attempts 3, timeout 60s, default priority -5") {
		t.Fatalf("text output: %s", out.stdout)
	}
	c.enqueue(t, e, "--type", "send_invoice")
}

func testEnqueue(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "email", "--max-attempts", "4")
	org := uuid.NewString()

	out := c.ok(t, e, "enqueue", "--type", "email", "--payload", `{"to":"a@example.com","n":[1,2]}`, "--org", org,
		"--priority", "7", "--timeout-seconds", "30", "--resource-key", "mailbox-1", "--json")
	res := object(t, out.stdout)
	wantKeys(t, "enqueue", res, "disposition", "job")
	if str(t, res, "disposition") != "inserted" {
		t.Fatalf("disposition = %s", res["disposition"])
	}
	j := sub(t, res, "job")
	wantJob(t, "job", j)
	if _, err := uuid.Parse(str(t, j, "id")); err != nil {
		t.Fatalf("id = %s", j["id"])
	}
	testdb.JSONEqual(t, "payload", j["payload"], `{"n":[1,2],"to":"a@example.com"}`)
	if str(t, j, "organization_id") != org || str(t, j, "job_type") != "email" || str(t, j, "status") != "PENDING" ||
		str(t, j, "stage") != "queued" || num(t, j, "priority") != 7 || num(t, j, "timeout_seconds") != 30 ||
		num(t, j, "max_attempts") != 4 || num(t, j, "run_number") != 1 || num(t, j, "attempt") != 0 ||
		str(t, j, "execution_resource_key") != "mailbox-1" || !isNull(j, "output") || !isNull(j, "idempotency_key") {
		t.Fatalf("job = %v", j)
	}

	// Defaults: global scope, payload {}.
	g := c.enqueue(t, e, "--type", "email")
	if !isNull(g, "organization_id") || num(t, g, "priority") != 100 || num(t, g, "max_attempts") != 4 {
		t.Fatalf("defaults: %v", g)
	}
	testdb.JSONEqual(t, "default payload", g["payload"], `{}`)

	// Keyed: the same request returns the same job; another is a conflict.
	first := object(t, c.ok(t, e, "enqueue", "--type", "email", "--idempotency-key", "inv-1", "--payload", `{"a":1}`, "--json").stdout)
	again := object(t, c.ok(t, e, "enqueue", "--type", "email", "--idempotency-key=inv-1", "--payload={\"a\": 1}", "--json").stdout)
	if str(t, again, "disposition") != "existing" || str(t, sub(t, again, "job"), "id") != str(t, sub(t, first, "job"), "id") {
		t.Fatalf("keyed retry: %v vs %v", again, first)
	}
	if str(t, sub(t, first, "job"), "idempotency_key") != "inv-1" {
		t.Fatalf("idempotency_key = %s", sub(t, first, "job")["idempotency_key"])
	}
	conflict := c.want(t, 5, e, "enqueue", "--type", "email", "--idempotency-key", "inv-1", "--payload", `{"a":2}`, "--json")
	if code := wantError(t, conflict, "conflict"); code != "job.idempotency_conflict" {
		t.Fatalf("code = %s", code)
	}
	// An undefined type is a validation error.
	if code := wantError(t, c.want(t, 2, e, "enqueue", "--type", "nope", "--json"), "validation"); code != "job.definition_not_found_or_disabled" {
		t.Fatalf("code = %s", code)
	}
}

func testClaimCompleteFail(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "a", "--max-attempts", "2")
	c.define(t, e, "b")
	c.define(t, e, "c")
	ja := str(t, c.enqueue(t, e, "--type", "a", "--priority", "50"), "id")
	jb := str(t, c.enqueue(t, e, "--type", "b", "--priority", "40"), "id")
	c.enqueue(t, e, "--type", "c", "--priority", "90")

	// Nothing of type "z" is due: an empty list, exit 0.
	empty := object(t, c.ok(t, e, "claim", "--worker", "w1", "--type", "z", "--json").stdout)
	wantKeys(t, "claim", empty, "jobs")
	if string(empty["jobs"]) != "[]" {
		t.Fatalf("empty claim: %s", empty["jobs"])
	}
	// Types repeated and comma-separated; c (higher priority) is not among them.
	got := list(t, object(t, c.ok(t, e, "claim", "--worker", "w1", "--type", "a,z", "--type", "b", "--limit", "5", "--lease", "1m", "--json").stdout), "jobs")
	if len(got) != 2 || str(t, got[0], "id") != ja || str(t, got[1], "id") != jb {
		t.Fatalf("claimed %v, want %s then %s", got, ja, jb)
	}
	for _, j := range got {
		wantJob(t, "claimed", j)
		lease := wantUTC(t, j, "lease_expires_at")
		started := wantUTC(t, j, "started_at")
		if str(t, j, "status") != "LEASED" || num(t, j, "attempt") != 1 || str(t, j, "worker_id") != "w1" ||
			lease.Sub(started).Seconds() < 59 || lease.Sub(started).Seconds() > 61 {
			t.Fatalf("claimed job = %v", j)
		}
	}

	// Complete a, with output.
	done := sub(t, object(t, c.ok(t, e, "complete", "--job", ja, "--run", "1", "--attempt", "1", "--worker", "w1", "--output", `{"sent":true}`, "--json").stdout), "job")
	wantJob(t, "completed", done)
	if str(t, done, "status") != "SUCCEEDED" || str(t, done, "id") != ja {
		t.Fatalf("completed = %v", done)
	}
	testdb.JSONEqual(t, "output", done["output"], `{"sent":true}`)
	wantUTC(t, done, "finished_at")
	// Completing again: the lease is gone, an expectation mismatch (exit 3).
	if code := wantError(t, c.want(t, 3, e, "complete", "--job", ja, "--run", "1", "--attempt", "1", "--worker", "w1", "--json"), "conflict"); code != "job.lease_mismatch" {
		t.Fatalf("code = %s", code)
	}
	// A wrong worker is a mismatch too; an unknown job is not found.
	c.want(t, 3, e, "fail", "--job", jb, "--run", "1", "--attempt", "1", "--worker", "intruder")
	if code := wantError(t, c.want(t, 4, e, "complete", "--job", uuid.NewString(), "--run", "1", "--attempt", "1", "--worker", "w1", "--json"), "not_found"); code != "job.not_found" {
		t.Fatalf("code = %s", code)
	}

	// Fail b with attempts left: a retry, due at once with --retry-delay 0s.
	f := sub(t, object(t, c.ok(t, e, "fail", "--job", jb, "--run", "1", "--attempt", "1", "--worker", "w1",
		"--error-code", "smtp", "--error-message", "mail server timed out", "--retry-delay", "0s", "--json").stdout), "job")
	wantJob(t, "failed", f)
	if str(t, f, "status") != "PENDING" || str(t, f, "last_error_code") != "smtp" || str(t, f, "last_error_message") != "mail server timed out" || !isNull(f, "worker_id") {
		t.Fatalf("failed job = %v", f)
	}
	again := list(t, object(t, c.ok(t, e, "claim", "--worker", "w2", "--type", "b", "--json").stdout), "jobs")
	if len(again) != 1 || num(t, again[0], "attempt") != 2 {
		t.Fatalf("reclaim = %v", again)
	}
	// --terminal dead-letters whatever attempts remain.
	dead := sub(t, object(t, c.ok(t, e, "fail", "--job", jb, "--run", "1", "--attempt", "2", "--worker", "w2", "--terminal", "--json").stdout), "job")
	if str(t, dead, "status") != "DEAD_LETTERED" {
		t.Fatalf("terminal fail = %v", dead)
	}
	// Without --terminal, the last attempt dead-letters too.
	jc := str(t, c.enqueue(t, e, "--type", "a"), "id")
	c.ok(t, e, "claim", "--worker", "w3", "--type", "a")
	c.ok(t, e, "fail", "--job", jc, "--run", "1", "--attempt", "1", "--worker", "w3", "--retry-delay=0s")
	c.ok(t, e, "claim", "--worker", "w3", "--type", "a")
	out := c.ok(t, e, "fail", "--job", jc, "--run", "1", "--attempt", "2", "--worker", "w3")
	if !strings.Contains(out.stdout, "dead-lettered") {
		t.Fatalf("last attempt: %s", out.stdout)
	}
}

func testReplay(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "report")
	org := uuid.NewString()
	src := c.succeeded(t, e, "report", org)
	args := func(run int, key, reason, scope string) []string {
		a := []string{"replay", "--job", src, "--run", strconv.Itoa(run), "--key", key, "--reason", reason, "--json"}
		if scope != "" {
			a = append(a, "--org", scope)
		}
		return a
	}

	// Inserted.
	r := object(t, c.ok(t, e, args(1, "k1", "rerun after fix", org)...).stdout)
	wantKeys(t, "replayed", r, "outcome", "disposition", "source_job_id", "source_run_number", "replay")
	rep := sub(t, r, "replay")
	wantKeys(t, "replay", rep, "job_id", "status", "run_number")
	if str(t, r, "outcome") != "replayed" || str(t, r, "disposition") != "inserted" || str(t, r, "source_job_id") != src ||
		num(t, r, "source_run_number") != 1 || str(t, rep, "status") != "PENDING" || num(t, rep, "run_number") != 1 {
		t.Fatalf("replayed = %v", r)
	}
	replayID := str(t, rep, "job_id")
	if _, err := uuid.Parse(replayID); err != nil || replayID == src {
		t.Fatalf("replay job id = %q", replayID)
	}

	// Existing: the same key and reason return the same job.
	r2 := object(t, c.ok(t, e, args(1, "k1", "rerun after fix", org)...).stdout)
	wantKeys(t, "replayed", r2, "outcome", "disposition", "source_job_id", "source_run_number", "replay")
	if str(t, r2, "disposition") != "existing" || str(t, sub(t, r2, "replay"), "job_id") != replayID {
		t.Fatalf("retry = %v", r2)
	}

	// Conflict: the key with another reason.
	if code := wantError(t, c.want(t, 5, e, args(1, "k1", "another reason", org)...), "conflict"); code != "job.replay_idempotency_conflict" {
		t.Fatalf("code = %s", code)
	}

	// Expectation mismatch: a run the job never succeeded at.
	m := object(t, c.want(t, 3, e, args(2, "k2", "stale", org)...).stdout)
	wantKeys(t, "mismatch", m, "outcome", "actual")
	actual := sub(t, m, "actual")
	wantJob(t, "actual", actual)
	if str(t, m, "outcome") != "expectation_mismatch" || str(t, actual, "id") != src || str(t, actual, "status") != "SUCCEEDED" ||
		num(t, actual, "run_number") != 1 || str(t, actual, "organization_id") != org {
		t.Fatalf("mismatch = %v", m)
	}
	testdb.JSONEqual(t, "actual output", actual["output"], `{"ok":true}`)
	// A job that has not succeeded (the replay itself) is a mismatch too.
	m = object(t, c.want(t, 3, e, "replay", "--job", replayID, "--run", "1", "--key", "k", "--reason", "r", "--org", org, "--json").stdout)
	if str(t, sub(t, m, "actual"), "status") != "PENDING" {
		t.Fatalf("mismatch on a pending job = %v", m)
	}

	// Not found: another tenant, the global scope, an unknown id.
	for _, a := range [][]string{
		args(1, "k1", "rerun after fix", uuid.NewString()),
		args(1, "k1", "rerun after fix", ""),
		{"replay", "--job", uuid.NewString(), "--run", "1", "--key", "k", "--reason", "r", "--json"},
	} {
		nf := object(t, c.want(t, 4, e, a...).stdout)
		wantKeys(t, "not_found", nf, "outcome")
		if str(t, nf, "outcome") != "not_found" {
			t.Fatalf("not found = %v", nf)
		}
	}

	// Nothing above touched the source, and only one replay exists.
	show := object(t, c.ok(t, e, "jobs", "show", src, "--org", org, "--json").stdout)
	if n := len(list(t, show, "replays")); n != 1 {
		t.Fatalf("%d replays, want 1", n)
	}
	if n := len(list(t, show, "events")); n != 3 {
		t.Fatalf("source has %d events, want 3", n)
	}

	// A disabled type refuses a new replay (validation), not an existing one.
	c.define(t, e, "report", "--enabled=false")
	if code := wantError(t, c.want(t, 2, e, args(1, "k3", "after disable", org)...), "validation"); code != "job.definition_not_found_or_disabled" {
		t.Fatalf("code = %s", code)
	}
	c.ok(t, e, args(1, "k1", "rerun after fix", org)...)
}

func testJobsShow(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "sync")
	org := uuid.NewString()
	src := c.succeeded(t, e, "sync", org)
	r := object(t, c.ok(t, e, "replay", "--job", src, "--run", "1", "--key", "nightly", "--reason", "re-sync after outage", "--org", org, "--json").stdout)
	replayID := str(t, sub(t, r, "replay"), "job_id")

	// The UUID may come before, between or after the flags, or after "--".
	var views []map[string]json.RawMessage
	for _, args := range [][]string{
		{"jobs", "show", src, "--org", org, "--json"},
		{"jobs", "show", "--org", org, src, "--json"},
		{"jobs", "show", "--json", src, "--org=" + org},
		{"jobs", "show", "--org", org, "--json", "--", src},
	} {
		views = append(views, object(t, c.ok(t, e, args...).stdout))
	}
	for _, v := range views[1:] {
		if str(t, sub(t, v, "job"), "id") != src {
			t.Fatalf("argument order changed the result: %v", v)
		}
	}
	v := views[0]
	wantKeys(t, "jobs show", v, "job", "events", "replays", "replayed_from")
	wantJob(t, "job", sub(t, v, "job"))
	events := list(t, v, "events")
	var types []string
	for i, ev := range events {
		wantKeys(t, "event", ev, "id", "job_id", "run_number", "attempt", "event_type", "stage", "progress_done", "progress_total", "payload", "occurred_at")
		wantUTC(t, ev, "occurred_at")
		if str(t, ev, "job_id") != src {
			t.Fatalf("event %d of another job: %v", i, ev)
		}
		if i > 0 && num(t, ev, "id") <= num(t, events[i-1], "id") {
			t.Fatalf("events out of order: %v", events)
		}
		types = append(types, str(t, ev, "event_type"))
	}
	if strings.Join(types, ",") != "ENQUEUED,LEASED,SUCCEEDED" {
		t.Fatalf("events = %v", types)
	}
	replays := list(t, v, "replays")
	if len(replays) != 1 {
		t.Fatalf("replays = %v", replays)
	}
	wantKeys(t, "replay", replays[0], "replay_job_id", "source_job_id", "source_run_number", "replay_request_key", "reason", "created_at", "replay_status", "replay_run_number")
	if str(t, replays[0], "replay_job_id") != replayID || str(t, replays[0], "replay_request_key") != "nightly" ||
		str(t, replays[0], "reason") != "re-sync after outage" || str(t, replays[0], "replay_status") != "PENDING" ||
		num(t, replays[0], "replay_run_number") != 1 || num(t, replays[0], "source_run_number") != 1 {
		t.Fatalf("replay = %v", replays[0])
	}
	wantUTC(t, replays[0], "created_at")
	if !isNull(v, "replayed_from") {
		t.Fatalf("source replayed_from = %s", v["replayed_from"])
	}

	// The replay points back to its source.
	rv := object(t, c.ok(t, e, "jobs", "show", replayID, "--org", org, "--json").stdout)
	from := sub(t, rv, "replayed_from")
	wantKeys(t, "replayed_from", from, "replay_job_id", "source_job_id", "source_run_number", "replay_request_key", "reason", "created_at")
	if str(t, from, "source_job_id") != src || str(t, from, "replay_job_id") != replayID || num(t, from, "source_run_number") != 1 {
		t.Fatalf("replayed_from = %v", from)
	}
	if string(rv["replays"]) != "[]" || len(list(t, rv, "events")) != 1 {
		t.Fatalf("replay view = %v", rv)
	}

	// Text form.
	out := c.ok(t, e, "jobs", "show", src, "--org", org)
	for _, want := range []string{"job " + src, "Events (3):", "ENQUEUED", "LEASED", "SUCCEEDED", "Replays made from this job (1):",
		replayID, "nightly", `"re-sync after outage"`, "PENDING at run 1", "Replayed from:", "(not a replay)"} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("jobs show text lacks %q:\n%s", want, out.stdout)
		}
	}
	out = c.ok(t, e, "jobs", "show", replayID, "--org", org)
	if !strings.Contains(out.stdout, "job "+src+", run 1, key nightly") {
		t.Errorf("replay's text lacks its source:\n%s", out.stdout)
	}

	// A page of the history says that more exists, and how to see it.
	paged := object(t, c.ok(t, e, "jobs", "show", src, "--org", org, "--events", "2", "--json").stdout)
	if got := list(t, paged, "events"); len(got) != 2 || string(paged["more_events"]) != "true" {
		t.Fatalf("--events 2: %d events, more_events %s", len(got), paged["more_events"])
	}
	oldest := num(t, list(t, paged, "events")[0], "id")
	out = c.ok(t, e, "jobs", "show", src, "--org", org, "--events", "2")
	if !strings.Contains(out.stdout, fmt.Sprintf("Events (the newest 2; older ones exist: --events-before %d):", oldest)) {
		t.Errorf("paged text lacks the hint:\n%s", out.stdout)
	}
	before := object(t, c.ok(t, e, "jobs", "show", src, "--org", org, "--events-before", fmt.Sprint(oldest), "--json").stdout)
	if got := list(t, before, "events"); len(got) != 1 || str(t, got[0], "event_type") != "ENQUEUED" || len(before["more_events"]) != 0 {
		t.Fatalf("--events-before %d: %v", oldest, before)
	}
	if code := wantError(t, c.want(t, 2, e, "jobs", "show", src, "--events", "0", "--json"), "validation"); code != "job.event_limit_invalid" {
		t.Fatalf("--events 0: code %s", code)
	}

	// Other scopes do not see it.
	for _, args := range [][]string{
		{"jobs", "show", src, "--json"},
		{"jobs", "show", src, "--org", uuid.NewString(), "--json"},
		{"jobs", "show", uuid.NewString(), "--org", org, "--json"},
	} {
		if code := wantError(t, c.want(t, 4, e, args...), "not_found"); code != "job.not_found" {
			t.Fatalf("code = %s", code)
		}
	}
	out = c.want(t, 4, e, "jobs", "show", src)
	wantOneLine(t, out.stderr)
}
