package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// maxRuns is how many bulk runs the console remembers; the oldest
// finished one is forgotten first.
const maxRuns = 100

// bulkRun is one bulk action running (or run) in this process, in the
// background: its progress outlives the request that started it.
type bulkRun struct {
	ID       string
	Kind     string
	Operator string
	Scope    string
	Started  time.Time
	// Fields is the action's form, to run it again (resume) after an
	// error or a restart: what it did is then reported existing.
	Fields url.Values

	mu       sync.Mutex
	t        tally
	finished bool
	err      string
}

// progress is a run's state, as the run page and its script show it.
type progress struct {
	Expected int    `json:"expected"`
	Done     int    `json:"done"`
	OK       int    `json:"ok"`
	Refused  int    `json:"refused"`
	Finished bool   `json:"finished"`
	Error    string `json:"error,omitempty"`
}

func (b *bulkRun) progress() progress {
	b.mu.Lock()
	defer b.mu.Unlock()
	return progress{Expected: b.t.expected, Done: b.t.done, OK: b.t.ok, Refused: b.t.refused, Finished: b.finished, Error: b.err}
}

// runs are the console's bulk runs by id.
type runs struct {
	mu    sync.Mutex
	byID  map[string]*bulkRun
	order []string
}

func newRuns() *runs { return &runs{byID: map[string]*bulkRun{}} }

func (rs *runs) get(id string) *bulkRun {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.byID[id]
}

// start runs sel in the background and returns its run. The run goes on
// when the request that started it ends; it stops with the process (the
// chunk in flight rolls back, and running the same action again resumes).
func (rs *runs) start(c *console, sel selection, counted int, fields url.Values, operator string) *bulkRun {
	var b [12]byte
	_, _ = rand.Read(b[:])
	run := &bulkRun{ID: hex.EncodeToString(b[:]), Kind: sel.kind, Operator: operator, Scope: sel.scope.String(),
		Started: time.Now().UTC(), Fields: fields, t: tally{expected: counted}}
	rs.mu.Lock()
	rs.byID[run.ID] = run
	rs.order = append(rs.order, run.ID)
	rs.forget()
	rs.mu.Unlock()

	go func() {
		err := sel.run(context.Background(), c.pool, func(t tally) {
			run.mu.Lock()
			run.t = t
			run.mu.Unlock()
		})
		run.mu.Lock()
		defer run.mu.Unlock()
		run.finished = true
		if err != nil {
			c.log.Error("console: bulk action failed", "kind", run.Kind, "run", run.ID, "err", err)
			run.err = "The action stopped on an error (see the console's log); what was done stays done. Run it again to resume."
		}
	}()
	return run
}

// forget drops the oldest finished runs beyond maxRuns; rs.mu is held.
func (rs *runs) forget() {
	for i := 0; len(rs.order) > maxRuns && i < len(rs.order); {
		run := rs.byID[rs.order[i]]
		if run.progress().Finished {
			delete(rs.byID, run.ID)
			rs.order = append(rs.order[:i], rs.order[i+1:]...)
			continue
		}
		i++
	}
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
