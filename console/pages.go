package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/health"
	"github.com/runledger-go/runledger/inspect"
)

type overviewView struct {
	Stats health.Stats
}

// overview shows the queue's health per job type, from the cached Stats
// read that /metrics shares.
func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	st, err := c.stats.Stats(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", overviewView{Stats: st})
}

type listView struct {
	Filter   filter
	Statuses []runledger.JobStatus
	Scoped   bool
	Jobs     []runledger.Job
	Next     string // the next page's address; "" on the last page
	// FilterFields is the filter, carried to the bulk forms.
	FilterFields url.Values
	Error        string
}

// jobList shows a page of the jobs matching the filter, newest first. A
// "Job ID" search goes straight to that job's page.
func (c *console) jobList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		http.Redirect(w, r, c.link("/jobs/"+id), http.StatusSeeOther)
		return
	}
	v := listView{Statuses: statuses, Scoped: c.opts.Scope != nil}
	f, err := c.parseFilter(q)
	v.Filter = f
	if err == nil {
		var before *inspect.Cursor
		if before, err = parseCursor(q.Get("before")); err == nil {
			var page inspect.Page
			page, err = inspect.Search(r.Context(), c.pool, f.search(before))
			if err == nil {
				v.Jobs = page.Jobs
				if page.Next != nil {
					next := f.values()
					next.Set("before", cursorParam(page.Next))
					v.Next = c.link("/jobs?" + next.Encode())
				}
			}
		}
	}
	v.FilterFields = f.values()
	if err != nil {
		var e *runledger.Error
		if errors.As(err, &e) && e.Category != runledger.CategoryValidation {
			c.fail(w, r, err)
			return
		}
		if errors.As(err, &e) {
			v.Error = e.Message
		} else {
			v.Error = err.Error()
		}
		c.render(w, r, http.StatusBadRequest, "jobs", v)
		return
	}
	c.render(w, r, http.StatusOK, "jobs", v)
}

type jobView struct {
	Detail inspect.Detail
	// Origin is the job this one was replayed from, as it is now.
	Origin *runledger.Job
	Scope  string
	// SuggestedKey prefills the replay form: a fresh key, so a click is a
	// new replay and a double submit of the same form is the same one.
	SuggestedKey string
	CanReplay    bool
	CanRequeue   bool
	CanCancel    bool
}

// jobPage shows one job: 404 when it does not exist in the console's
// scope.
func (c *console) jobPage(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.notFound(w, r)
		return
	}
	v, err := c.loadJob(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "job", v)
}

// scopeOf is the scope a job is read and acted on in: the console's, or
// (unscoped) the job's own.
func (c *console) scopeOf(ctx context.Context, id uuid.UUID) (runledger.Scope, error) {
	if c.opts.Scope != nil {
		return *c.opts.Scope, nil
	}
	return inspect.Locate(ctx, c.pool, id)
}

// loadJob reads what the job page shows.
func (c *console) loadJob(ctx context.Context, id uuid.UUID) (jobView, error) {
	scope, err := c.scopeOf(ctx, id)
	if err != nil {
		return jobView{}, err
	}
	d, err := inspect.GetDetail(ctx, c.pool, inspect.DetailRequest{Scope: scope, JobID: id})
	if err != nil {
		return jobView{}, err
	}
	v := jobView{Detail: d, Scope: scope.String()}
	if d.ReplayedFrom != nil {
		src, err := inspect.Get(ctx, c.pool, scope, d.ReplayedFrom.SourceJobID)
		if err == nil {
			v.Origin = &src
		} else if !errors.Is(err, runledger.CodeJobNotFound) {
			return jobView{}, err
		}
	}
	key, err := uuid.NewV7()
	if err != nil {
		return jobView{}, err
	}
	v.SuggestedKey = "console-" + key.String()
	if !c.opts.ReadOnly {
		switch d.Job.Status {
		case runledger.JobStatusSucceeded:
			v.CanReplay = true
		case runledger.JobStatusDeadLettered, runledger.JobStatusCanceled:
			v.CanRequeue = true
		case runledger.JobStatusPending, runledger.JobStatusLeased:
			v.CanCancel = true
		}
	}
	return v, nil
}
