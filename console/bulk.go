package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
)

// Bulk actions over every job matching the job list's filter: a form (the
// filter, a key for replay, a reason), a dry run that counts the
// selection and pins its finish bound, then the run, in the library's
// chunks, whose progress the run page shows live. There is no cap on the
// selection. Rerunning the same action (same filter, bound, key and
// reason) resumes it: what was done is reported existing, only the rest
// is done.

// The bulk kinds, as in the path.
const (
	kindReplay  = "replay"
	kindRequeue = "requeue"
)

type bulkView struct {
	Kind   string
	Filter filter
	Fields url.Values // the filter and the action's fields, carried to the next step
	Key    string
	Reason string
	Reset  bool
	Scope  string
	// Counted is the dry run's count; -1 before the dry run.
	Counted int
	Error   string
}

// bulkForm shows a bulk action's form for the filter in the query.
func (c *console) bulkForm(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	if kind != kindReplay && kind != kindRequeue {
		c.render(w, r, http.StatusNotFound, "error", "No such page.")
		return
	}
	if c.opts.ReadOnly {
		c.render(w, r, http.StatusForbidden, "error", "The console is read-only: actions are refused.")
		return
	}
	f, err := c.parseFilter(r.URL.Query())
	v := bulkView{Kind: kind, Filter: f, Fields: f.values(), Counted: -1}
	if kind == kindReplay {
		key, kerr := uuid.NewV7()
		if kerr != nil {
			c.fail(w, r, kerr)
			return
		}
		v.Key = "console-bulk-" + key.String()
	}
	code := http.StatusOK
	if err != nil {
		v.Error, code = err.Error(), http.StatusBadRequest
	}
	c.render(w, r, code, "bulk", v)
}

// bulkAction is the form's dry run ("mode" dry-run) or run ("mode" run,
// only with the dry run's count and pinned bound).
func (c *console) bulkAction(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	if kind != kindReplay && kind != kindRequeue {
		c.render(w, r, http.StatusNotFound, "error", "No such page.")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.render(w, r, http.StatusBadRequest, "error", "The form could not be read.")
		return
	}
	f, err := c.parseFilter(r.PostForm)
	v := bulkView{Kind: kind, Filter: f, Key: r.PostFormValue("key"), Reason: r.PostFormValue("reason"),
		Reset: r.PostFormValue("reset_progress") != "", Counted: -1}
	var sel selection
	if err == nil {
		sel, err = c.selection(kind, f, operatorOf(r.Context()), v)
	}
	if err != nil {
		v.Fields, v.Error = f.values(), err.Error()
		c.render(w, r, http.StatusBadRequest, "bulk", v)
		return
	}
	v.Scope = sel.scope.String()
	if r.PostFormValue("mode") != "run" {
		c.dryRun(w, r, sel, v)
		return
	}
	counted, err := strconv.Atoi(r.PostFormValue("counted"))
	if err != nil || f.until == nil {
		v.Fields, v.Error = f.values(), "Run a dry run first: it counts the jobs and fixes the selection."
		c.render(w, r, http.StatusBadRequest, "bulk", v)
		return
	}
	fields := f.values()
	for _, k := range []string{"key", "reason", "reset_progress"} {
		if x := r.PostFormValue(k); x != "" {
			fields.Set(k, x)
		}
	}
	fields.Set("counted", strconv.Itoa(counted))
	run := c.runs.start(c, sel, counted, fields, operatorOf(r.Context()))
	http.Redirect(w, r, c.link("/bulk/runs/"+run.ID), http.StatusSeeOther)
}

// dryRun counts the selection now, pins its finish bound (the time now,
// when the filter has none) and shows the count with the form that runs
// exactly that selection.
func (c *console) dryRun(w http.ResponseWriter, r *http.Request, sel selection, v bulkView) {
	if v.Filter.until == nil {
		now := time.Now().UTC()
		v.Filter.until, v.Filter.Until = &now, now.Format(time.RFC3339Nano)
		sel = sel.withUntil(now)
	}
	n, err := sel.count(r.Context(), c.pool)
	if err != nil {
		var e *runledger.Error
		if errors.As(err, &e) && e.Category == runledger.CategoryValidation {
			v.Fields, v.Error = v.Filter.values(), e.Message
			c.render(w, r, http.StatusBadRequest, "bulk", v)
			return
		}
		c.fail(w, r, err)
		return
	}
	v.Counted = n
	v.Fields = v.Filter.values()
	c.renderOutcome(w, r, http.StatusOK, "bulk", outcome{Text: fmt.Sprintf(
		"Dry run: %d jobs match in scope %s (finished before %s). Nothing was written.", n, v.Scope, v.Filter.Until)}, v)
}

// bulkRunPage shows a run's progress; the script updates it live.
func (c *console) bulkRunPage(w http.ResponseWriter, r *http.Request) {
	run := c.runs.get(r.PathValue("run"))
	if run == nil {
		c.render(w, r, http.StatusNotFound, "error", "No such bulk action.")
		return
	}
	p := run.progress()
	var o outcome
	if p.Finished && p.Error == "" {
		o.Text = fmt.Sprintf("Finished: %d of %d done, %d refused.", p.OK, p.Done, p.Refused)
	}
	c.renderOutcome(w, r, http.StatusOK, "run", o, runView{Run: run, Progress: p, ReadOnly: c.opts.ReadOnly})
}

// bulkRunJSON is a run's progress for the script.
func (c *console) bulkRunJSON(w http.ResponseWriter, r *http.Request) {
	run := c.runs.get(r.PathValue("run"))
	if run == nil {
		http.Error(w, "no such bulk action", http.StatusNotFound)
		return
	}
	writeJSON(w, run.progress())
}

type runView struct {
	Run      *bulkRun
	Progress progress
	ReadOnly bool
}
