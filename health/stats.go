package health

import (
	"context"
	"math"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

// DefaultWindow is the window of finished jobs Stats summarizes when the
// request sets none; MaxWindow is the longest it accepts.
const (
	DefaultWindow = time.Hour
	MaxWindow     = 31 * 24 * time.Hour
)

var (
	errWindowInvalid = errs.Validation("health.stats_window_invalid",
		"Stats window must be positive and at most 31 days.")
	errJobTypeInvalid = errs.Validation("health.job_type_invalid",
		"Job type filter must be non-blank UTF-8 without NUL bytes, at most 255 bytes.")
)

var queries = db.New()

// Querier runs the statements of a read: *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it.
type Querier = db.DBTX

// StatsRequest selects what Stats summarizes.
type StatsRequest struct {
	// Scope limits the stats to one tenant (runledger.Global() is the
	// global scope's own jobs); nil summarizes every tenant, an operator's
	// view.
	Scope *runledger.Scope
	// JobType limits the stats to one job type; "" reports every type.
	JobType string
	// Window is how far back the finished counts and run times reach, by
	// finished_at: [now - Window, now). Zero means DefaultWindow.
	Window time.Duration
}

// Validate checks the request without database work.
func (r StatsRequest) Validate() error {
	if r.Scope != nil {
		if err := validate.Scope(*r.Scope); err != nil {
			return err
		}
	}
	if r.JobType != "" && validate.Text(r.JobType, runledger.MaxJobTypeBytes) != validate.OK {
		return errJobTypeInvalid.Newf("job type filter of %d bytes is blank, holds NUL or invalid UTF-8, or is too long", len(r.JobType))
	}
	if r.Window < 0 || r.Window > MaxWindow {
		return errWindowInvalid.Newf("window %s is not between 0 and %s", r.Window, MaxWindow)
	}
	return nil
}

// Stats is the health of the queue at one instant of the database clock.
type Stats struct {
	// At is the database clock the figures were read at (UTC).
	At time.Time
	// Window is the span of finished jobs summarized, ending at At.
	Window time.Duration
	// Types holds one entry per job type with live or recently finished
	// jobs, by job type.
	Types []TypeStats
	// Total sums the counts over Types; its OldestDueAge is the oldest of
	// all, and it has no run times (percentiles do not add up).
	Total TypeStats
}

// TypeStats is the health of one job type. The live counts are exact at
// Stats.At; the finished counts cover the window.
type TypeStats struct {
	// JobType is the job type ("" in Stats.Total).
	JobType string
	// Paused says the type is paused (jobs.PauseType): its due jobs wait
	// and no worker claims them until it is resumed.
	Paused bool
	// PendingDue counts PENDING jobs whose next_run_at has come: the
	// backlog workers should be taking.
	PendingDue int64
	// PendingScheduled counts PENDING jobs due later (scheduled, or waiting
	// for a retry delay).
	PendingScheduled int64
	// Leased counts LEASED jobs, running or held by a worker.
	Leased int64
	// ExpiredLeases counts LEASED jobs whose lease has run out and that no
	// recovery has taken back yet.
	ExpiredLeases int64
	// OldestDueAge is how long the oldest due PENDING job has been due
	// (the queue lag); nil without due jobs.
	OldestDueAge *time.Duration
	// Succeeded, DeadLettered and Canceled count the jobs that finished so
	// within the window.
	Succeeded, DeadLettered, Canceled int64
	// RunTimeP50 and RunTimeP95 are percentiles (continuous) of
	// finished_at - started_at over the window's finished jobs that ran (a
	// job canceled before any claim did not); nil when none did. For a
	// retried job it is its last attempt's run time.
	RunTimeP50, RunTimeP95 *time.Duration
}

// statsRow is a row of JobStatsTenant or JobStatsAll (the same columns).
type statsRow = db.JobStatsAllRow

// GetStats reads the queue's health in one statement (one snapshot), with
// no lock. Its cost follows the live queue and the window, never the size
// of the history. On pool or inside the caller's transaction (where the
// clock is the transaction's start).
func GetStats(ctx context.Context, q Querier, req StatsRequest) (Stats, error) {
	if err := req.Validate(); err != nil {
		return Stats{}, err
	}
	q = txn.Wrap(q)
	window := req.Window
	if window == 0 {
		window = DefaultWindow
	}
	var jobType *string
	if req.JobType != "" {
		jobType = &req.JobType
	}
	var (
		rs  []statsRow
		err error
	)
	if req.Scope == nil {
		rs, err = queries.JobStatsAll(ctx, q, db.JobStatsAllParams{JobType: jobType, WindowSeconds: window.Seconds()})
	} else {
		var trs []db.JobStatsTenantRow
		trs, err = queries.JobStatsTenant(ctx, q, db.JobStatsTenantParams{
			OrganizationID: rows.Tenant(*req.Scope), JobType: jobType, WindowSeconds: window.Seconds(),
		})
		for _, r := range trs {
			rs = append(rs, statsRow(r))
		}
	}
	if err != nil {
		return Stats{}, dberr.Translate(ctx, "read queue stats", err)
	}
	st := Stats{Window: window, Types: []TypeStats{}}
	for _, r := range rs {
		st.At = r.Now.UTC()
		if r.JobType == "" {
			continue
		}
		t := TypeStats{
			JobType: r.JobType, Paused: r.Paused, PendingDue: r.PendingDue, PendingScheduled: r.PendingScheduled,
			Leased: r.Leased, ExpiredLeases: r.ExpiredLeases,
			Succeeded: r.Succeeded, DeadLettered: r.DeadLettered, Canceled: r.Canceled,
		}
		if r.PendingDue > 0 {
			t.OldestDueAge = seconds(r.OldestDueAgeSeconds)
		}
		if r.Ran > 0 {
			t.RunTimeP50, t.RunTimeP95 = seconds(r.RunP50Seconds), seconds(r.RunP95Seconds)
		}
		st.Types = append(st.Types, t)
		st.Total.add(t)
	}
	return st, nil
}

// add sums t's counts into s and keeps the older due age.
func (s *TypeStats) add(t TypeStats) {
	s.PendingDue += t.PendingDue
	s.PendingScheduled += t.PendingScheduled
	s.Leased += t.Leased
	s.ExpiredLeases += t.ExpiredLeases
	s.Succeeded += t.Succeeded
	s.DeadLettered += t.DeadLettered
	s.Canceled += t.Canceled
	if t.OldestDueAge != nil && (s.OldestDueAge == nil || *t.OldestDueAge > *s.OldestDueAge) {
		age := *t.OldestDueAge
		s.OldestDueAge = &age
	}
}

// seconds converts a non-negative number of seconds to a Duration, rounded
// to the microsecond (the clock's resolution).
func seconds(s float64) *time.Duration {
	d := time.Duration(math.Round(math.Max(s, 0)*1e6)) * time.Microsecond
	return &d
}
