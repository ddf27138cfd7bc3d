package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
)

var queries = db.New()

// Schedule is a stored schedule.
type Schedule struct {
	Scope   runledger.Scope
	Name    string
	Cron    string
	TZ      string
	JobType string
	// Payload is a JSON object; each fired job gets it with PayloadKey
	// added.
	Payload json.RawMessage
	// Priority of the fired jobs; nil takes the definition's default.
	Priority *int32
	// JitterSeconds delays each fired job after its tick by a fixed
	// number of seconds from 0 to JitterSeconds chosen by name and tick.
	JitterSeconds int32
	Missed        Missed
	MissedMax     int32
	// Active is false while paused: a paused schedule is never claimed.
	Active bool
	// NextFireAt is the cursor: the first tick not yet handled.
	NextFireAt time.Time
	// LastFiredAt is the last tick that fired a job, nil before the first.
	LastFiredAt *time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

func scheduleOf(r db.JobSchedule) Schedule {
	out := Schedule{
		Scope: rows.ScopeOfTenant(r.OrganizationID), Name: r.Name, Cron: r.Cron, TZ: r.Tz,
		JobType: r.JobType, Payload: r.Payload, Priority: r.Priority, JitterSeconds: r.JitterSeconds,
		Missed: Missed(r.Missed), MissedMax: r.MissedMax, Active: r.Active,
		NextFireAt: r.NextFireAt.UTC(), CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
	if r.LastFiredAt != nil {
		t := r.LastFiredAt.UTC()
		out.LastFiredAt = &t
	}
	return out
}

// UpsertRequest creates or changes a schedule.
type UpsertRequest struct {
	Scope runledger.Scope
	// Name identifies the schedule within its scope.
	Name string
	// Cron has five fields (minute hour day-of-month month day-of-week)
	// or six with seconds first.
	Cron string
	// TZ is the IANA zone the expression is read in; "" is UTC.
	TZ      string
	JobType string
	// Payload must be a JSON object without PayloadKey; nil is {}.
	Payload  json.RawMessage
	Priority *int32
	// Jitter is whole seconds from 0 to MaxJitter.
	Jitter time.Duration
	// Missed is the missed-tick policy; "" is MissedLatest.
	Missed Missed
	// MissedMax bounds MissedAll; 0 is DefaultMissedMax.
	MissedMax int32
	// Active: nil is true.
	Active *bool
}

// Validate checks the request without touching the database: scope
// (job.organization_invalid), name (schedule.name_invalid), cron and zone
// (schedule.cron_invalid: not five or six fields, a descriptor or zone
// prefix, or no tick at all; schedule.timezone_invalid: unknown to this
// machine's zone database, or "Local"), job type
// (schedule.job_type_invalid), payload (schedule.payload_invalid), jitter
// (schedule.jitter_invalid) and missed policy (schedule.missed_invalid).
func (r UpsertRequest) Validate() error {
	_, err := r.check()
	return err
}

func (r UpsertRequest) check() (spec, error) {
	if err := validate.Scope(r.Scope); err != nil {
		return spec{}, err
	}
	if err := validateName(r.Name); err != nil {
		return spec{}, err
	}
	sp, err := parseSpec(r.Cron, r.TZ)
	if err != nil {
		return spec{}, err
	}
	if validate.Text(r.JobType, runledger.MaxJobTypeBytes) != validate.OK {
		return spec{}, errJobType.Newf("job type of %d bytes is blank, unclean or too long", len(r.JobType))
	}
	if err := validatePayload(r.Payload); err != nil {
		return spec{}, err
	}
	if r.Jitter < 0 || r.Jitter > MaxJitter || r.Jitter%time.Second != 0 {
		return spec{}, errJitter.Newf("jitter %s", r.Jitter)
	}
	switch r.Missed {
	case "", MissedLatest, MissedSkip, MissedAll:
	default:
		return spec{}, errMissed.Newf("missed policy %q", r.Missed)
	}
	if r.MissedMax < 0 || r.MissedMax > MaxMissedMax {
		return spec{}, errMissed.Newf("missed max %d", r.MissedMax)
	}
	return sp, nil
}

// row is the request as stored values.
func (r UpsertRequest) row() db.JobSchedule {
	tz := r.TZ
	if tz == "" {
		tz = "UTC"
	}
	payload := r.Payload
	if payload == nil {
		payload = json.RawMessage(`{}`)
	}
	missed := r.Missed
	if missed == "" {
		missed = MissedLatest
	}
	missedMax := r.MissedMax
	if missedMax == 0 {
		missedMax = DefaultMissedMax
	}
	active := r.Active == nil || *r.Active
	return db.JobSchedule{
		OrganizationID: rows.Tenant(r.Scope), Name: r.Name, Cron: r.Cron, Tz: tz, JobType: r.JobType,
		Payload: payload, Priority: r.Priority, JitterSeconds: int32(r.Jitter / time.Second),
		Missed: string(missed), MissedMax: missedMax, Active: active,
	}
}

// UpsertResult is the schedule an upsert left and what it did.
type UpsertResult struct {
	Schedule Schedule
	// Disposition is "inserted", "updated" or "unchanged".
	Disposition string
}

// Dispositions of an upsert.
const (
	Inserted  = "inserted"
	Updated   = "updated"
	Unchanged = "unchanged"
)

// Upsert creates the schedule or changes it to the request, in its own
// READ COMMITTED transaction. A new schedule's cursor is the first tick
// after the database clock. A change keeps the cursor (the next tick
// stays due as it was) unless the cron expression or zone changes, or the
// schedule is re-activated: then it is the first tick after the database
// clock, so no tick of the old expression or of the pause fires. A request
// equal to the stored schedule (payload compared as jsonb) writes nothing
// and says "unchanged". The job type is not checked here: a schedule
// whose definition is missing or disabled is reported by FireDue, not
// fired. The existing row is locked FOR UPDATE, so an upsert waits for a
// firer holding it.
func Upsert(ctx context.Context, pool *pgxpool.Pool, req UpsertRequest) (UpsertResult, error) {
	sp, err := req.check()
	if err != nil {
		return UpsertResult{}, err
	}
	return txn.ReadCommitted(ctx, pool, "schedule upsert", func(q db.DBTX) (UpsertResult, error) {
		return upsert(ctx, q, req, sp)
	})
}

// UpsertTx is Upsert inside the caller's transaction, which it never
// commits or rolls back. The transaction must be read-write READ
// COMMITTED (else schedule.unsupported_isolation, nothing done), so that
// an insert that met a concurrent one of the same name finds it.
func UpsertTx(ctx context.Context, tx pgx.Tx, req UpsertRequest) (UpsertResult, error) {
	sp, err := req.check()
	if err != nil {
		return UpsertResult{}, err
	}
	s := txn.Join(tx, "schedule upsert")
	if err := txn.CheckCallerTx(ctx, s, "schedule upsert", errUnsupportedIsolation); err != nil {
		return UpsertResult{}, err
	}
	return upsert(ctx, s.DB(), req, sp)
}

func upsert(ctx context.Context, q db.DBTX, req UpsertRequest, sp spec) (UpsertResult, error) {
	want := req.row()
	for attempt := 0; attempt < 2; attempt++ {
		locked, err := queries.ScheduleLock(ctx, q, db.ScheduleLockParams{OrganizationID: want.OrganizationID, Name: want.Name})
		if errors.Is(err, pgx.ErrNoRows) {
			now, err := queries.ServerClock(ctx, q)
			if err != nil {
				return UpsertResult{}, dberr.Translate(ctx, "read the database clock", err)
			}
			ins, err := queries.ScheduleInsert(ctx, q, db.ScheduleInsertParams{
				OrganizationID: want.OrganizationID, Name: want.Name, Cron: want.Cron, Tz: want.Tz,
				JobType: want.JobType, Payload: want.Payload, Priority: want.Priority,
				JitterSeconds: want.JitterSeconds, Missed: want.Missed, MissedMax: want.MissedMax,
				Active: want.Active, NextFireAt: sp.next(now),
			})
			if errors.Is(err, pgx.ErrNoRows) {
				continue // a concurrent upsert inserted it: lock and update
			}
			if err != nil {
				return UpsertResult{}, dberr.Translate(ctx, "insert schedule", err)
			}
			return UpsertResult{Schedule: scheduleOf(ins), Disposition: Inserted}, nil
		}
		if err != nil {
			return UpsertResult{}, dberr.Translate(ctx, "lock schedule", err)
		}
		cur := locked.JobSchedule
		next := cur.NextFireAt
		if cur.Cron != want.Cron || cur.Tz != want.Tz || (want.Active && !cur.Active) {
			next = sp.next(locked.Now)
		}
		if same(cur, want, next) {
			return UpsertResult{Schedule: scheduleOf(cur), Disposition: Unchanged}, nil
		}
		up, err := queries.ScheduleUpdate(ctx, q, db.ScheduleUpdateParams{
			OrganizationID: want.OrganizationID, Name: want.Name, Cron: want.Cron, Tz: want.Tz,
			JobType: want.JobType, Payload: want.Payload, Priority: want.Priority,
			JitterSeconds: want.JitterSeconds, Missed: want.Missed, MissedMax: want.MissedMax,
			Active: want.Active, NextFireAt: next,
		})
		if err != nil {
			return UpsertResult{}, dberr.Translate(ctx, "update schedule", err)
		}
		return UpsertResult{Schedule: scheduleOf(up), Disposition: Updated}, nil
	}
	return UpsertResult{}, errInvariantUpsert
}

var errInvariantUpsert = errs.Invariant("schedule upsert: the row was neither inserted nor found, twice")

// same reports whether the stored row already is the request with cursor
// next. Payloads compare as decoded JSON (the stored one is jsonb text).
func same(cur, want db.JobSchedule, next time.Time) bool {
	if cur.Cron != want.Cron || cur.Tz != want.Tz || cur.JobType != want.JobType ||
		cur.JitterSeconds != want.JitterSeconds || cur.Missed != want.Missed ||
		cur.MissedMax != want.MissedMax || cur.Active != want.Active || !cur.NextFireAt.Equal(next) {
		return false
	}
	if (cur.Priority == nil) != (want.Priority == nil) || (cur.Priority != nil && *cur.Priority != *want.Priority) {
		return false
	}
	return jsonEqual(cur.Payload, want.Payload)
}
