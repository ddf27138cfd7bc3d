package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/console"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// TestRoutesAuthAndHeaders checks every route's answer without and with
// authentication, and the security headers on each.
func TestRoutesAuthAndHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.server(t, console.Options{})
	job := "/jobs/" + f.succeededA.String()

	resp, body := do(t, srv, "GET", "/healthz", false, nil, nil)
	wantCode(t, resp, body, http.StatusOK)

	for _, p := range []string{"/", "/jobs", job, "/bulk/replay"} {
		resp, body := do(t, srv, "GET", p, false, nil, nil)
		wantCode(t, resp, body, http.StatusSeeOther)
		if loc := resp.Header.Get("Location"); loc != "/login" {
			t.Errorf("GET %s: redirected to %q, want /login", p, loc)
		}
	}
	for _, p := range []string{"/metrics", "/api/bulk/runs/x"} {
		resp, body := do(t, srv, "GET", p, false, nil, nil)
		wantCode(t, resp, body, http.StatusUnauthorized)
	}
	for _, p := range []string{job + "/replay", job + "/requeue", job + "/cancel", "/bulk/replay"} {
		resp, body := do(t, srv, "POST", p, false, map[string]string{"run": "1"}, nil)
		wantCode(t, resp, body, http.StatusUnauthorized)
	}

	resp, body = do(t, srv, "GET", "/login?token=wrong", false, nil, nil)
	wantCode(t, resp, body, http.StatusUnauthorized)
	if len(resp.Cookies()) != 0 {
		t.Errorf("a wrong token set cookies %v", resp.Cookies())
	}
	resp, body = do(t, srv, "GET", "/login?token="+testToken, false, nil, nil)
	wantCode(t, resp, body, http.StatusSeeOther)
	cks := resp.Cookies()
	if len(cks) != 1 || !cks[0].HttpOnly || cks[0].SameSite != http.SameSiteStrictMode || cks[0].Value == testToken {
		t.Fatalf("login cookie %+v: want one HttpOnly, SameSite=Strict cookie not holding the token", cks)
	}
	cookie := map[string]string{"Cookie": cks[0].Name + "=" + cks[0].Value}

	for _, p := range []string{"/", "/jobs", "/jobs?status=SUCCEEDED&type=email&org=" + f.orgA.String() + "&error_code=x&finished_since=2020-01-01T00:00",
		job, "/bulk/requeue?status=DEAD_LETTERED", "/static/console.js", "/static/console.css", "/metrics"} {
		resp, body := do(t, srv, "GET", p, false, nil, cookie)
		wantCode(t, resp, body, http.StatusOK)
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", p, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", p)
		}
	}
	resp, body = do(t, srv, "GET", "/jobs?status=NOPE", true, nil, nil)
	wantCode(t, resp, body, http.StatusBadRequest)
	resp, body = do(t, srv, "GET", "/jobs/"+testdb.RandomHex(4), true, nil, nil)
	wantCode(t, resp, body, http.StatusNotFound)
	resp, body = do(t, srv, "GET", "/jobs/0192e7e0-0000-7000-8000-000000000000", true, nil, nil)
	wantCode(t, resp, body, http.StatusNotFound)
	resp, body = do(t, srv, "GET", job+"/replay", true, nil, nil)
	wantCode(t, resp, body, http.StatusMethodNotAllowed)

	resp, body = do(t, srv, "GET", "/metrics", true, nil, nil)
	wantCode(t, resp, body, http.StatusOK)
	for _, s := range []string{`runledger_jobs{status="pending_due",type="email"}`, "runledger_oldest_due_seconds", "runledger_expired_leases"} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %s:\n%s", s, body)
		}
	}
}

// TestCrossOriginPostRefused: a POST from another origin is refused before
// it acts, even with a valid session.
func TestCrossOriginPostRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.server(t, console.Options{})
	form := map[string]string{"run": "1", "key": "k", "reason": "r"}
	resp, body := do(t, srv, "POST", "/jobs/"+f.succeededA.String()+"/replay", true, form,
		map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
	wantCode(t, resp, body, http.StatusForbidden)
	if n := testdb.Scalar[int64](t, f.pool, `SELECT count(*) FROM job_replays`); n != 0 {
		t.Fatalf("%d replays written by a cross-origin POST", n)
	}
}

// TestReplayRecordsOperator: a replay from the console records the
// operator in the replay's ENQUEUED event; a stale run is a mismatch that
// writes nothing.
func TestReplayRecordsOperator(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.server(t, console.Options{Operator: func(r *http.Request) (string, bool) {
		return r.Header.Get("X-User"), r.Header.Get("X-User") != ""
	}})
	user := map[string]string{"X-User": "alice"}
	path := "/jobs/" + f.succeededA.String() + "/replay"
	resp, body := do(t, srv, "POST", path, false, map[string]string{"run": "2", "key": "k1", "reason": "why"}, user)
	wantCode(t, resp, body, http.StatusConflict)
	if !strings.Contains(body, "It is now SUCCEEDED at run 1") {
		t.Errorf("mismatch page does not show the job as it is: %.600s", body)
	}
	resp, body = do(t, srv, "POST", path, false, map[string]string{"run": "1", "key": "k1", "reason": "why"}, user)
	wantCode(t, resp, body, http.StatusOK)
	op := testdb.Scalar[string](t, f.pool, `SELECT e.payload->>'operator' FROM job_events e JOIN job_replays r ON r.replay_job_id = e.job_id
		WHERE r.source_job_id = $1 AND e.event_type = 'ENQUEUED'`, f.succeededA)
	if op != "alice" {
		t.Fatalf("ENQUEUED event's operator %q, want alice", op)
	}
	resp, body = do(t, srv, "POST", path, false, map[string]string{"run": "1", "key": "k1", "reason": "why"}, nil)
	wantCode(t, resp, body, http.StatusUnauthorized)
}

// TestReadOnlyRefusesActions: read-only mode hides the buttons and refuses
// every action with 403, whatever the request holds.
func TestReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.server(t, console.Options{ReadOnly: true})
	resp, body := do(t, srv, "GET", "/jobs/"+f.succeededA.String(), true, nil, nil)
	wantCode(t, resp, body, http.StatusOK)
	if strings.Contains(body, ">Replay</button>") {
		t.Error("read-only job page shows the Replay button")
	}
	for _, p := range []string{"/jobs/" + f.succeededA.String() + "/replay", "/jobs/" + f.deadA.String() + "/requeue",
		"/jobs/" + f.deadA.String() + "/cancel", "/bulk/requeue"} {
		resp, body := do(t, srv, "POST", p, true, map[string]string{"run": "1", "key": "k", "reason": "r", "status": "DEAD_LETTERED"}, nil)
		wantCode(t, resp, body, http.StatusForbidden)
	}
	if n := testdb.Scalar[int64](t, f.pool, `SELECT count(*) FROM job_events`); n != 0 {
		t.Fatalf("read-only console wrote %d events", n)
	}
}

// TestScopedConsoleHidesOtherTenants: with a scope, another tenant's job
// is 404 on its page and to every action.
func TestScopedConsoleHidesOtherTenants(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := runledger.Organization(f.orgA)
	srv := f.server(t, console.Options{Scope: &a})
	resp, body := do(t, srv, "GET", "/jobs/"+f.succeededB.String(), true, nil, nil)
	wantCode(t, resp, body, http.StatusNotFound)
	resp, body = do(t, srv, "POST", "/jobs/"+f.succeededB.String()+"/replay", true, map[string]string{"run": "1", "key": "k", "reason": "r"}, nil)
	wantCode(t, resp, body, http.StatusNotFound)
	resp, body = do(t, srv, "GET", "/jobs/"+f.succeededA.String(), true, nil, nil)
	wantCode(t, resp, body, http.StatusOK)
	resp, body = do(t, srv, "GET", "/jobs", true, nil, nil)
	wantCode(t, resp, body, http.StatusOK)
	if strings.Contains(body, f.succeededB.String()) || !strings.Contains(body, f.succeededA.String()) {
		t.Errorf("scoped job list shows the wrong tenants")
	}
}

// TestPayloadIsEscaped: a payload holding a script tag is shown as text.
func TestPayloadIsEscaped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.server(t, console.Options{})
	resp, body := do(t, srv, "GET", "/jobs/"+f.scriptA.String(), true, nil, nil)
	wantCode(t, resp, body, http.StatusOK)
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("payload not escaped: %.2000s", body)
	}
}

// TestCancelComparesWhatThePageShowed: a cancel for a run the job no
// longer has writes nothing; the right one cancels and records the
// operator.
func TestCancelComparesWhatThePageShowed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.server(t, console.Options{})
	pending := testdb.Succeeded(runledger.Organization(f.orgA))
	pending.Status = "PENDING"
	id := testdb.Seed(t, f.pool, pending)
	testdb.Exec(t, f.pool, `UPDATE job_queue SET finished_at = NULL, started_at = NULL, worker_id = NULL WHERE id = $1`, id)
	path := "/jobs/" + id.String() + "/cancel"
	resp, body := do(t, srv, "POST", path, true, map[string]string{"status": "PENDING", "run": "2", "reason": "stop"}, nil)
	wantCode(t, resp, body, http.StatusConflict)
	resp, body = do(t, srv, "POST", path, true, map[string]string{"status": "PENDING", "run": "1", "reason": "stop"}, nil)
	wantCode(t, resp, body, http.StatusOK)
	op := testdb.Scalar[string](t, f.pool, `SELECT payload->>'operator' FROM job_events WHERE job_id = $1 AND event_type = 'CANCELED'`, id)
	if op != console.TokenOperator {
		t.Fatalf("CANCELED event's operator %q, want %q", op, console.TokenOperator)
	}
	resp, body = do(t, srv, "POST", path, true, map[string]string{"status": "PENDING", "run": "1", "reason": "stop"}, nil)
	wantCode(t, resp, body, http.StatusConflict)
}

// TestBulkReplayDryRunThenRun: the dry run counts and writes nothing; a
// run without the dry run is refused; the run replays every match.
func TestBulkReplayDryRunThenRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := f.server(t, console.Options{BulkChunk: 2})
	form := map[string]string{"type": "email", "org": f.orgA.String(), "key": "bulk-1", "reason": "resend", "mode": "dry-run"}
	resp, body := do(t, srv, "POST", "/bulk/replay", true, form, nil)
	wantCode(t, resp, body, http.StatusOK)
	if !strings.Contains(body, "Dry run: 2 jobs match") {
		t.Fatalf("dry run page: %.1500s", body)
	}
	form["mode"] = "run"
	resp, body = do(t, srv, "POST", "/bulk/replay", true, form, nil)
	wantCode(t, resp, body, http.StatusBadRequest)
	if n := testdb.Scalar[int64](t, f.pool, `SELECT count(*) FROM job_replays`); n != 0 {
		t.Fatalf("%d replays before the run", n)
	}
	form["counted"], form["finished_until"] = "2", "2999-01-01T00:00:00Z"
	resp, body = do(t, srv, "POST", "/bulk/replay", true, form, nil)
	wantCode(t, resp, body, http.StatusSeeOther)
	runPath := "/api" + resp.Header.Get("Location")
	for {
		resp, body = do(t, srv, "GET", runPath, true, nil, nil)
		wantCode(t, resp, body, http.StatusOK)
		if strings.Contains(body, `"finished":true`) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling for the background run's end, as the page's script does
	}
	if !strings.Contains(body, `"done":2,"ok":2,"refused":0`) {
		t.Fatalf("progress %s", body)
	}
	if n := testdb.Scalar[int64](t, f.pool, `SELECT count(*) FROM job_events WHERE event_type = 'ENQUEUED' AND payload->>'operator' = 'token'`); n != 2 {
		t.Fatalf("%d ENQUEUED events name the operator, want 2", n)
	}
}

// TestOverviewSaysATypeIsPaused: the overview marks a paused job type.
func TestOverviewSaysATypeIsPaused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := jobs.PauseType(context.Background(), f.pool, "charge"); err != nil {
		t.Fatal(err)
	}
	srv := f.server(t, console.Options{})
	resp, body := do(t, srv, "GET", "/", true, nil, nil)
	wantCode(t, resp, body, http.StatusOK)
	if !strings.Contains(body, ">charge</a> (paused)</th>") || strings.Contains(body, ">email</a> (paused)") {
		t.Fatalf("overview does not mark exactly the paused type: %.3000s", body)
	}
}

// TestTypePauseAndResume: the overview's Pause and Resume buttons pause
// and resume a job type for every tenant; a read-only console and a
// console scoped to one tenant refuse them (403) and change nothing; an
// unknown type is 404.
func TestTypePauseAndResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	paused := func() bool {
		return testdb.Scalar[bool](t, f.pool, `SELECT is_paused FROM job_definitions WHERE job_type = 'email'`)
	}
	srv := f.server(t, console.Options{})
	resp, body := do(t, srv, "GET", "/", true, nil, nil)
	wantCode(t, resp, body, http.StatusOK)
	if !strings.Contains(body, `aria-label="Pause email"`) {
		t.Fatalf("overview has no Pause button for email: %.2000s", body)
	}

	resp, body = do(t, srv, "POST", "/types/email/pause", true, map[string]string{}, nil)
	wantCode(t, resp, body, http.StatusOK)
	if !strings.Contains(body, "Job type email is paused") || !strings.Contains(body, `aria-label="Resume email"`) || !paused() {
		t.Fatalf("after pause: paused=%v, page %.2000s", paused(), body)
	}
	resp, body = do(t, srv, "POST", "/types/email/resume", true, map[string]string{}, nil)
	wantCode(t, resp, body, http.StatusOK)
	if !strings.Contains(body, "Job type email is resumed") || paused() {
		t.Fatalf("after resume: paused=%v, page %.2000s", paused(), body)
	}

	resp, body = do(t, srv, "POST", "/types/no-such-type/pause", true, map[string]string{}, nil)
	wantCode(t, resp, body, http.StatusNotFound)

	for name, opts := range map[string]console.Options{
		"read-only": {ReadOnly: true},
		"scoped":    {Scope: testdb.Ptr(runledger.Organization(f.orgA))},
	} {
		srv := f.server(t, opts)
		resp, body := do(t, srv, "GET", "/", true, nil, nil)
		wantCode(t, resp, body, http.StatusOK)
		if strings.Contains(body, `aria-label="Pause email"`) {
			t.Errorf("%s console shows a Pause button", name)
		}
		resp, body = do(t, srv, "POST", "/types/email/pause", true, map[string]string{}, nil)
		wantCode(t, resp, body, http.StatusForbidden)
		if paused() {
			t.Fatalf("%s console paused the type", name)
		}
	}
}
