package console

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
)

// filter is the job list's filter as the operator typed it (echoed back
// into the form and the links) and as the library takes it.
type filter struct {
	Status, Type, Org, ErrorCode, Since, Until string

	scope        *runledger.Scope
	status       *runledger.JobStatus
	since, until *time.Time
}

// statuses are the choices of the Status filter.
var statuses = []runledger.JobStatus{runledger.JobStatusPending, runledger.JobStatusLeased,
	runledger.JobStatusSucceeded, runledger.JobStatusDeadLettered, runledger.JobStatusCanceled}

// parseFilter reads a filter from a query or form. The Organization field
// counts only in an unscoped console: blank for every tenant, "global" for
// the global scope, or an organization's UUID; a scoped console always
// uses its own scope.
func (c *console) parseFilter(v url.Values) (filter, error) {
	f := filter{
		Status: strings.TrimSpace(v.Get("status")), Type: strings.TrimSpace(v.Get("type")),
		Org: strings.TrimSpace(v.Get("org")), ErrorCode: strings.TrimSpace(v.Get("error_code")),
		Since: strings.TrimSpace(v.Get("finished_since")), Until: strings.TrimSpace(v.Get("finished_until")),
	}
	if f.Status != "" {
		st := runledger.JobStatus(f.Status)
		known := false
		for _, s := range statuses {
			known = known || s == st
		}
		if !known {
			return f, fmt.Errorf("status %q is not a job status", f.Status)
		}
		f.status = &st
	}
	switch {
	case c.opts.Scope != nil:
		f.Org, f.scope = "", c.opts.Scope
	case f.Org == "global":
		g := runledger.Global()
		f.scope = &g
	case f.Org != "":
		id, err := uuid.Parse(f.Org)
		if err != nil || id == uuid.Nil {
			return f, fmt.Errorf("organization %q is not an organization id (a UUID, or \"global\")", f.Org)
		}
		s := runledger.Organization(id)
		f.scope = &s
	}
	var err error
	if f.since, err = parseTime(f.Since); err != nil {
		return f, fmt.Errorf("finished since: %w", err)
	}
	if f.until, err = parseTime(f.Until); err != nil {
		return f, fmt.Errorf("finished until: %w", err)
	}
	return f, nil
}

// parseTime reads a time as RFC 3339 or as a browser's datetime-local
// value, taken as UTC; "" is none.
func parseTime(s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, fmt.Errorf("%q is not a time (RFC 3339, or YYYY-MM-DDTHH:MM in UTC)", s)
}

// search is the filter as the library's request for one page.
func (f filter) search(before *inspect.Cursor) inspect.SearchRequest {
	return inspect.SearchRequest{Scope: f.scope, Status: f.status, JobType: f.Type, ErrorCode: f.ErrorCode,
		FinishedSince: f.since, FinishedUntil: f.until, Limit: PageSize, Before: before}
}

// values is the filter as a query, for links that keep it.
func (f filter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"status": f.Status, "type": f.Type, "org": f.Org, "error_code": f.ErrorCode,
		"finished_since": f.Since, "finished_until": f.Until} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// cursorParam writes a page cursor as "created_at~id".
func cursorParam(c *inspect.Cursor) string {
	return c.CreatedAt.UTC().Format(time.RFC3339Nano) + "~" + c.ID.String()
}

// parseCursor reads cursorParam's form; "" is the first page.
func parseCursor(s string) (*inspect.Cursor, error) {
	if s == "" {
		return nil, nil
	}
	at, id, ok := strings.Cut(s, "~")
	if !ok {
		return nil, fmt.Errorf("page cursor %q is malformed", s)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, fmt.Errorf("page cursor %q is malformed", s)
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("page cursor %q is malformed", s)
	}
	return &inspect.Cursor{CreatedAt: t, ID: u}, nil
}
