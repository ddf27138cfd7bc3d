package schedules

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/jobs"
)

// DefaultGrace is FireRequest.Grace when it is zero.
const DefaultGrace = time.Minute

// FireRequest asks to fire the due schedules.
type FireRequest struct {
	// JobTypes restricts firing to schedules of these types (a worker
	// passes the types it registered); empty means every type.
	JobTypes []string
	// Limit is the most schedules claimed in one call, 1 to 1000.
	Limit int
	// Grace is how late a tick may be and still count as on time for
	// MissedSkip; zero is DefaultGrace.
	Grace time.Duration
}

// Fire is one tick a schedule fired.
type Fire struct {
	Scope    runledger.Scope
	Schedule string
	Tick     time.Time
	JobID    uuid.UUID
	// Disposition is Inserted, or Existing when a job with the tick's key
	// and the same request was already there.
	Disposition runledger.Disposition
}

// Blocked is a due schedule that was not fired: its cursor stays, so it
// fires (by its missed policy) once the cause is gone.
type Blocked struct {
	Scope      runledger.Scope
	Schedule   string
	JobType    string
	NextFireAt time.Time
	// Err says why: runledger.CodeDefinitionNotFoundOrDisabled when the
	// job type's definition is missing or disabled; schedule.cron_invalid
	// or schedule.timezone_invalid when this machine cannot read the
	// stored expression or zone; runledger.CodeIdempotencyConflict when
	// the tick's key is held by a job enqueued with another request.
	Err error
}

// FireResult is what one FireDue call did.
type FireResult struct {
	// Now is the database clock the call went by.
	Now     time.Time
	Fired   []Fire
	Blocked []Blocked
}

// FireDue fires the schedules due at the database clock, in one READ
// COMMITTED transaction of its own: it reads now() once, claims up to
// req.Limit active due schedules (next_fire_at <= now) whose job type's
// definition is enabled, FOR UPDATE SKIP LOCKED (a schedule another
// firer, or an upsert, holds is passed by), enqueues each tick the missed
// policy picks as a keyed enqueue (key IdempotencyKey(name, tick), the
// schedule's payload with PayloadKey added, run at tick plus the
// schedule's jitter), moves each cursor to the first tick after now, and
// commits. Several firers in any number of processes therefore fire a
// tick at most once; a firer that dies mid-fire rolls back and fires
// nothing; the clocks of the firers' machines play no part.
//
// Missed policies, with L the newest tick at or before now: latest fires
// L; skip fires L only when it is at most req.Grace late; all fires the
// due ticks oldest first, the newest MissedMax of them.
//
// Due schedules whose definition is missing or disabled are not claimed:
// they are listed in FireResult.Blocked (up to req.Limit, read without a
// lock) and keep their cursor, so they fire by their missed policy once
// the type is enabled again. A claimed schedule whose enqueue finds the
// definition gone meanwhile is reported too, its cursor stopped at the
// tick that could not fire (the ticks before it fired); one whose stored
// expression or zone this machine cannot read is reported and keeps its
// cursor. A tick whose key a job enqueued with another request holds is
// reported as Blocked and passed: it never makes a second job. On Citus the claim goes tenant
// by tenant (the tenants with due schedules, most overdue first, then a
// claim routed to each); across tenants the oldest cursor is not
// guaranteed first. A failed COMMIT matches runledger.ErrCommitUnconfirmed:
// retrying is safe, a tick's key never makes a second job.
func FireDue(ctx context.Context, pool *pgxpool.Pool, req FireRequest) (FireResult, error) {
	if err := req.validate(); err != nil {
		return FireResult{}, err
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return FireResult{}, dberr.Translate(ctx, "begin schedule fire transaction", err)
	}
	// Commit hands the connection back to the pool whatever its outcome:
	// nothing may touch tx after it (a rollback would race the
	// connection's next user), so only an uncommitted tx is rolled back.
	committing := false
	defer func() {
		if !committing {
			txn.Rollback(ctx, tx)
		}
	}()
	res, err := fire(ctx, tx, req)
	if err != nil {
		return FireResult{}, err
	}
	committing = true
	if err := tx.Commit(ctx); err != nil {
		return FireResult{}, dberr.CommitUnconfirmed(ctx, "commit schedule fire", err)
	}
	return res, nil
}

// FireDueTx is FireDue inside the caller's transaction, which must be
// READ COMMITTED (the keyed enqueues require it; else the enqueue's
// isolation error). The claimed schedules stay locked, and the fired jobs
// invisible, until the caller's transaction ends.
func FireDueTx(ctx context.Context, tx pgx.Tx, req FireRequest) (FireResult, error) {
	if err := req.validate(); err != nil {
		return FireResult{}, err
	}
	return fire(ctx, tx, req)
}

func (r *FireRequest) validate() error {
	if r.Limit < 1 || r.Limit > 1000 {
		return errLimit.Newf("fire limit %d", r.Limit)
	}
	if r.Grace <= 0 {
		r.Grace = DefaultGrace
	}
	if r.JobTypes == nil {
		r.JobTypes = []string{}
	}
	return nil
}

func fire(ctx context.Context, tx pgx.Tx, req FireRequest) (FireResult, error) {
	s := txn.Join(tx, "schedule fire")
	q := s.DB()
	now, err := queries.ServerClock(ctx, q)
	if err != nil {
		return FireResult{}, dberr.Translate(ctx, "read the database clock", err)
	}
	res := FireResult{Now: now.UTC()}
	claimed, err := claim(ctx, s, req, now)
	if err != nil {
		return FireResult{}, err
	}
	for _, r := range claimed {
		if err := fireOne(ctx, tx, q, r, now, req.Grace, &res); err != nil {
			return FireResult{}, err
		}
	}
	blocked, err := queries.ScheduleListBlocked(ctx, q, db.ScheduleListBlockedParams{
		Now: now, JobTypes: req.JobTypes, MaxRows: int32(req.Limit),
	})
	if err != nil {
		return FireResult{}, dberr.Translate(ctx, "list blocked schedules", err)
	}
	for _, b := range blocked {
		res.Blocked = append(res.Blocked, Blocked{
			Scope: rows.ScopeOfTenant(b.OrganizationID), Schedule: b.Name, JobType: b.JobType,
			NextFireAt: b.NextFireAt.UTC(), Err: errDefinitionUnavailable(b.JobType),
		})
	}
	return res, nil
}

func errDefinitionUnavailable(jobType string) error {
	return &runledger.Error{Code: runledger.CodeDefinitionNotFoundOrDisabled, Category: runledger.CategoryValidation,
		Message: "Job type is not available.", Detail: "schedule's job type " + jobType + " is missing or disabled"}
}

// claim locks the due schedules: one statement over every tenant on one
// server; on Citus the tenants with due schedules first, then a statement
// routed to each, until the limit is reached.
func claim(ctx context.Context, s *txn.Session, req FireRequest, now time.Time) ([]db.JobSchedule, error) {
	dist, err := s.Distributed(ctx)
	if err != nil {
		return nil, err
	}
	q := s.DB()
	if !dist {
		rs, err := queries.ScheduleClaimDue(ctx, q, db.ScheduleClaimDueParams{Now: now, JobTypes: req.JobTypes, MaxRows: int32(req.Limit)})
		if err != nil {
			return nil, dberr.Translate(ctx, "claim due schedules", err)
		}
		return rs, nil
	}
	tenants, err := queries.ScheduleListTenantsDue(ctx, q, db.ScheduleListTenantsDueParams{
		Now: now, JobTypes: req.JobTypes, MaxTenants: int32(req.Limit),
	})
	if err != nil {
		return nil, dberr.Translate(ctx, "list tenants with due schedules", err)
	}
	var out []db.JobSchedule
	for _, t := range tenants {
		if len(out) >= req.Limit {
			break
		}
		rs, err := queries.ScheduleClaimDueTenant(ctx, q, db.ScheduleClaimDueTenantParams{
			OrganizationID: t, Now: now, JobTypes: req.JobTypes, MaxRows: int32(req.Limit - len(out)),
		})
		if err != nil {
			return nil, dberr.Translate(ctx, "claim due schedules", err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// ticksToFire applies the missed policy to a schedule whose cursor is due
// at now.
func ticksToFire(sp spec, r db.JobSchedule, now time.Time, grace time.Duration) []time.Time {
	switch Missed(r.Missed) {
	case MissedAll:
		return sp.lastTicks(r.NextFireAt, now, int(max(r.MissedMax, 1)))
	case MissedSkip:
		last := sp.lastTicks(r.NextFireAt, now, 1)
		if len(last) == 1 && now.Sub(last[0]) <= grace {
			return last
		}
		return nil
	default:
		return sp.lastTicks(r.NextFireAt, now, 1)
	}
}

// fireOne enqueues the ticks of one claimed schedule and moves its
// cursor. When an enqueue finds the definition unavailable the cursor
// stops at that tick (the ticks before it stay fired) and the schedule is
// reported.
func fireOne(ctx context.Context, tx pgx.Tx, q db.DBTX, r db.JobSchedule, now time.Time, grace time.Duration, res *FireResult) error {
	scope := rows.ScopeOfTenant(r.OrganizationID)
	report := func(err error) {
		res.Blocked = append(res.Blocked, Blocked{Scope: scope, Schedule: r.Name, JobType: r.JobType, NextFireAt: r.NextFireAt.UTC(), Err: err})
	}
	sp, err := parseSpec(r.Cron, r.Tz)
	if err != nil {
		report(err)
		return nil
	}
	next := sp.next(now)
	var last *time.Time
	for _, tick := range ticksToFire(sp, r, now, grace) {
		payload, err := firedPayload(r.Payload, r.Name, tick)
		if err != nil {
			return err
		}
		runAt := tick.Add(jitterOf(r.Name, tick, r.JitterSeconds))
		out, err := jobs.EnqueueTx(ctx, tx, jobs.EnqueueRequest{
			Scope: scope, JobType: r.JobType, Payload: payload, Priority: r.Priority,
			RunAt: &runAt, IdempotencyKey: IdempotencyKey(r.Name, tick),
		})
		switch {
		case errors.Is(err, runledger.CodeDefinitionNotFoundOrDisabled):
			report(err)
			next = tick
		case errors.Is(err, runledger.CodeIdempotencyConflict):
			// Another job holds the key (a schedule of the same name
			// deleted and made again with another payload, or an enqueue
			// by hand): this tick is passed, not fired twice.
			report(err)
			continue
		case err != nil:
			return err
		default:
			t := tick
			last = &t
			res.Fired = append(res.Fired, Fire{Scope: scope, Schedule: r.Name, Tick: tick, JobID: out.Job.ID, Disposition: out.Disposition})
			continue
		}
		break
	}
	if err := queries.ScheduleAdvance(ctx, q, db.ScheduleAdvanceParams{
		OrganizationID: r.OrganizationID, Name: r.Name, NextFireAt: next, LastFiredAt: last, Now: now,
	}); err != nil {
		return dberr.Translate(ctx, "advance schedule", err)
	}
	return nil
}

// AnyDue reports whether an active schedule of one of jobTypes is due at
// the database clock, in one statement with no lock: what a poller asks
// before FireDue, so that a poll with nothing due costs one statement
// whatever the number of schedules not due. A schedule whose type's
// definition is missing or disabled counts as due (FireDue reports it).
// An empty jobTypes matches no schedule.
func AnyDue(ctx context.Context, q jobs.Querier, jobTypes []string) (bool, error) {
	if jobTypes == nil {
		jobTypes = []string{}
	}
	due, err := queries.ScheduleAnyDue(ctx, q, jobTypes)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, dberr.Translate(ctx, "read whether a schedule is due", err)
	}
	return due, nil
}
