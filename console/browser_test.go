package console_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/console"
	"github.com/runledger-go/runledger/internal/testdb"
)

// chromiumPath is Debian's chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// newBrowser starts a headless chromium with a fresh profile. Without
// chromium the test fails (CI installs it), except under -short, where
// browser tests are skipped.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("browser tests are skipped under -short")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("browser tests need chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	profile, err := os.MkdirTemp("", "runledger-console-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
		_ = os.RemoveAll(profile) // chromium may still be writing its profile as it exits
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// The elements, found by their accessible names (CONTRACT's names): a
// button by its text, a field by its label.
func button(name string) string { return fmt.Sprintf(`//button[normalize-space(.)=%q]`, name) }
func field(label string) string {
	return fmt.Sprintf(`//*[@id=(//label[normalize-space(.)=%q]/@for)]`, label)
}

const statusRegion = `//*[@role="status"]`

// run runs actions, failing the test with step's name.
func run(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// waitText waits until the element's text contains want. It reads the
// text in the page (no node handle survives a navigation), so it can
// follow a form's submission.
func waitText(sel, want string) chromedp.Action {
	js := fmt.Sprintf(`(function(){var n=document.evaluate(%q,document,null,XPathResult.FIRST_ORDERED_NODE_TYPE,null).singleNodeValue;return n?n.textContent:""})()`, sel)
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var got string
		for {
			if err := chromedp.Evaluate(js, &got).Do(ctx); err == nil && strings.Contains(got, want) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %q in %s (last %q): %w", want, sel, got, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

func click(sel string) chromedp.Action { return chromedp.Click(sel, chromedp.BySearch) }
func fill(label, text string) chromedp.Action {
	return chromedp.SendKeys(field(label), text, chromedp.BySearch)
}

// TestBrowserOperatorFlows drives a real chromium through the console's
// flows of an on-call operator.
func TestBrowserOperatorFlows(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	f := newFixture(t)
	a := runledger.Organization(f.orgA)
	for range 5 {
		dead := testdb.Succeeded(a)
		dead.JobType, dead.Status = "refund", "DEAD_LETTERED"
		testdb.Seed(t, f.pool, dead)
	}
	srv := f.server(t, console.Options{})

	run(t, ctx, "log in with the token",
		chromedp.Navigate(srv.URL+"/login?token="+testToken),
		waitText(`//h1`, "Overview"))

	run(t, ctx, "filter the list by status",
		chromedp.Navigate(srv.URL+"/jobs"),
		chromedp.SetValue(field("Status"), "DEAD_LETTERED", chromedp.BySearch),
		click(button("Filter")),
		// The unfiltered list holds the dead job too: wait for the
		// filtered page itself before reading its table.
		// (the bulk forms carry the filter of the page they are on).
		chromedp.WaitReady(`//div[@class="bulk"]//input[@name="status"][@value="DEAD_LETTERED"]`, chromedp.BySearch),
		waitText(`//table`, f.deadA.String()))
	var list string
	run(t, ctx, "read the list", chromedp.Text(`//table`, &list, chromedp.BySearch))
	if strings.Contains(list, f.succeededA.String()) {
		t.Fatal("the DEAD_LETTERED filter lists a SUCCEEDED job")
	}

	var replayID string
	run(t, ctx, "open a job by its id and replay it",
		fill("Job ID", f.succeededA.String()),
		click(button("Open")),
		waitText(`//h1`, f.succeededA.String()),
		fill("Reason", "customer asked"),
		click(button("Replay")),
		waitText(statusRegion, "Replayed: a new job was enqueued."),
		waitText(`//table[@id="replays"]`, "PENDING"),
		chromedp.Text(`//*[@role="status"]/a`, &replayID, chromedp.BySearch))
	replayID = strings.TrimPrefix(replayID, "Open replay ")
	run(t, ctx, "the replay's page shows where it came from",
		click(`//*[@role="status"]/a`),
		waitText(`//h1`, replayID),
		waitText(`//*[@id="replayed-from"]`, f.succeededA.String()),
		waitText(`//*[@id="replayed-from"]`, "now SUCCEEDED at run 1"))

	run(t, ctx, "open the job again", chromedp.Navigate(srv.URL+"/jobs/"+f.succeededA.String()),
		waitText(`//table[@id="replays"]`, replayID))
	testdb.Exec(t, f.pool, `UPDATE job_queue SET run_number = 2 WHERE id = $1`, f.succeededA)
	run(t, ctx, "a replay of a run that changed meanwhile",
		fill("Reason", "again"),
		click(button("Replay")),
		waitText(statusRegion, "It is now SUCCEEDED at run 2"),
		waitText(`//*[@id="job-run"]`, "2"))

	run(t, ctx, "requeue a dead-lettered job",
		chromedp.Navigate(srv.URL+"/jobs/"+f.deadA.String()),
		fill("Reason", "provider is back"),
		click(button("Requeue")),
		waitText(statusRegion, "Requeued: the job is PENDING at run 2."),
		waitText(`//table[@id="requeues"]`, "provider is back"))

	run(t, ctx, "bulk requeue: dry run, then run with progress",
		chromedp.Navigate(srv.URL+"/jobs?status=DEAD_LETTERED&type=refund&org="+f.orgA.String()),
		click(button("Bulk requeue")),
		waitText(`//h1`, "Bulk requeue of every job"),
		fill("Reason", "refunds back"),
		click(button("Dry run")),
		waitText(statusRegion, "Dry run: 5 jobs match"),
		click(button("Run")),
		waitText(`//*[@id="bulk-text"]`, "5 of 5 done"),
		waitText(statusRegion, "Finished: 5 of 5 done, 0 refused."))
	if n := testdb.Scalar[int64](t, f.pool, `SELECT count(*) FROM job_events WHERE event_type = 'REQUEUED' AND payload->>'operator' = 'token'`); n != 6 {
		t.Fatalf("%d REQUEUED events name the operator, want 6", n)
	}

	var scripts int
	run(t, ctx, "a payload holding a script tag is shown as text",
		chromedp.Navigate(srv.URL+"/jobs/"+f.scriptA.String()),
		waitText(`//pre[@id="payload"]`, "<script>alert(1)</script>"),
		chromedp.Evaluate(`document.scripts.length`, &scripts))
	if scripts != 1 {
		t.Fatalf("the job page holds %d scripts, want only the console's", scripts)
	}
}

// TestBrowserReadOnlyAndScope: a read-only console shows no action and
// refuses a POST; a scoped console answers 404 for another tenant's job.
func TestBrowserReadOnlyAndScope(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	f := newFixture(t)
	a := runledger.Organization(f.orgA)
	srv := f.server(t, console.Options{ReadOnly: true, Scope: &a})

	var buttons, status int
	run(t, ctx, "read-only: no action buttons, and the POST is refused",
		chromedp.Navigate(srv.URL+"/login?token="+testToken),
		chromedp.Navigate(srv.URL+"/jobs/"+f.succeededA.String()),
		waitText(`//h1`, f.succeededA.String()),
		chromedp.Evaluate(`document.querySelectorAll("button").length`, &buttons),
		chromedp.Evaluate(`fetch(location.pathname + "/replay", {method: "POST",
			body: new URLSearchParams({run: "1", key: "k", reason: "r"})}).then(r => r.status)`, &status,
			func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if buttons != 0 {
		t.Errorf("read-only job page has %d buttons", buttons)
	}
	if status != 403 {
		t.Errorf("read-only POST answered %d, want 403", status)
	}
	if n := testdb.Scalar[int64](t, f.pool, `SELECT count(*) FROM job_replays`); n != 0 {
		t.Fatalf("read-only console wrote %d replays", n)
	}

	run(t, ctx, "another tenant's job is not found",
		chromedp.Navigate(srv.URL+"/jobs/"+f.succeededB.String()),
		waitText(`//h1`, "No such job."))
}
