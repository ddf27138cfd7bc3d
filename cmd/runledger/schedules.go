package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger/schedules"
)

// scheduleJSON is the S object of the schedules commands.
type scheduleJSON struct {
	Name          string          `json:"name"`
	Org           *uuid.UUID      `json:"org"`
	Cron          string          `json:"cron"`
	TZ            string          `json:"tz"`
	JobType       string          `json:"job_type"`
	Payload       json.RawMessage `json:"payload"`
	Priority      *int32          `json:"priority"`
	JitterSeconds int32           `json:"jitter_seconds"`
	Missed        string          `json:"missed"`
	MissedMax     int32           `json:"missed_max"`
	Active        bool            `json:"active"`
	NextFireAt    time.Time       `json:"next_fire_at"`
	LastFiredAt   *time.Time      `json:"last_fired_at"`
}

func scheduleView(s schedules.Schedule) scheduleJSON {
	return scheduleJSON{
		Name: s.Name, Org: s.Scope.OrganizationIDPtr(), Cron: s.Cron, TZ: s.TZ, JobType: s.JobType,
		Payload: s.Payload, Priority: s.Priority, JitterSeconds: s.JitterSeconds, Missed: string(s.Missed),
		MissedMax: s.MissedMax, Active: s.Active, NextFireAt: s.NextFireAt.UTC(), LastFiredAt: s.LastFiredAt,
	}
}

// scheduleResult is the output of every schedules command but list.
type scheduleResult struct {
	Outcome     string       `json:"outcome"`
	Disposition string       `json:"disposition,omitempty"`
	Schedule    scheduleJSON `json:"schedule"`
	verb        string
}

func (r scheduleResult) text(w io.Writer) {
	what := r.verb
	if r.Disposition != "" {
		what = r.Disposition
	}
	fmt.Fprintf(w, "Schedule %s (%s):\n", r.Schedule.Name, what)
	writeSchedule(w, r.Schedule, "  ")
}

type scheduleListResult struct {
	Schedules []scheduleJSON `json:"schedules"`
}

func (r scheduleListResult) text(w io.Writer) {
	fmt.Fprintf(w, "Schedules (%d):\n", len(r.Schedules))
	for _, s := range r.Schedules {
		state := "active"
		if !s.Active {
			state = "paused"
		}
		fmt.Fprintf(w, "  %s  %q %s  %s  %s  next %s\n", s.Name, s.Cron, s.TZ, s.JobType, state, humanTime(s.NextFireAt))
	}
}

func writeSchedule(w io.Writer, s scheduleJSON, indent string) {
	scope := "global (no organization)"
	if s.Org != nil {
		scope = "organization " + s.Org.String()
	}
	last := "never"
	if s.LastFiredAt != nil {
		last = humanTime(*s.LastFiredAt)
	}
	prio := "definition default"
	if s.Priority != nil {
		prio = fmt.Sprint(*s.Priority)
	}
	fmt.Fprintf(w, "%sscope          %s\n%scron           %s (%s)\n%sjob type       %s\n%spayload        %s\n"+
		"%spriority       %s\n%sjitter         %ds\n%smissed         %s (max %d)\n%sactive         %t\n"+
		"%snext fire      %s\n%slast fired     %s\n",
		indent, scope, indent, s.Cron, s.TZ, indent, s.JobType, indent, s.Payload, indent, prio,
		indent, s.JitterSeconds, indent, s.Missed, s.MissedMax, indent, s.Active, indent, humanTime(s.NextFireAt), indent, last)
}

const scheduleOutputHelp = `S is {"name","org","cron","tz","job_type","payload","priority",
"jitter_seconds","missed","missed_max","active","next_fire_at","last_fired_at"}
(org null for the global scope; priority null takes the definition's
default; last_fired_at null before the first fire; times RFC 3339 UTC).`

var schedulesUpsertCmd = &command{
	name:    "schedules upsert",
	summary: "Create a schedule or replace its settings.",
	help: `Creates the schedule N of the scope (--org, default global) or replaces
its settings with the flags given; a flag left out takes its default, not
the stored value. The cron expression has five fields (minute hour
day-of-month month day-of-week) or six with seconds first, read in --tz
(default UTC). Each tick enqueues a job of --type whose idempotency key is
schedule:N:TICK (TICK in RFC 3339 UTC) and whose payload is --payload (a
JSON object) with a "schedule" key added: {"name":N,"tick":TICK}.
--missed says what happens to ticks missed while no worker ran: latest
(fire once for the newest), skip (never fire a missed tick) or all (each,
at most --missed-max per round). The next fire is kept when only other
settings change; a new cron or zone, or --active=true on a paused
schedule, starts from the next tick after now. Workers of the type fire
it; a schedule whose type is missing or disabled is reported, not fired.

Output (--json):
  {"outcome":"schedule","disposition":"inserted"|"updated"|"unchanged","schedule":{S}}
` + scheduleOutputHelp + `

Exit codes: 0 done; 2 invalid input (bad cron or zone, payload not an
object); 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		name := fs.str("name", "`N`: the schedule's name, unique in its scope.")
		fs.requireFlag("name")
		cronExpr := fs.str("cron", "`EXPR`: five fields, or six with seconds first.")
		fs.requireFlag("cron")
		jobType := fs.str("type", "`T`: the job type each tick enqueues.")
		fs.requireFlag("type")
		payload := fs.jsonFlag("payload", "`JSON`: an object, the fired jobs' payload (default {}).")
		org := fs.uuidFlag("org", "`UUID`: the schedule's organization (tenant). Default: global scope.")
		tz := fs.str("tz", "`ZONE`: IANA time zone the expression is read in (default UTC).")
		jitter := fs.duration("jitter", 0, "`D`: delay each fired job by up to D after its tick (whole seconds, at most 24h).")
		priority := fs.int32Opt("priority", "`N`: the fired jobs' priority (default: the definition's).")
		missed := fs.str("missed", "`POLICY`: latest (default), skip or all.")
		missedMax := fs.intDefault("missed-max", schedules.DefaultMissedMax, "`N`: with --missed all, the most missed ticks fired per round (1 to 1000).")
		active := fs.boolOpt("active", "Whether the schedule fires (--active=false creates or leaves it paused).")
		return func(ctx context.Context, inv *invocation) (result, error) {
			if *missedMax == 0 {
				*missedMax = -1 // asked for 0: refused like any value below 1
			}
			req := schedules.UpsertRequest{
				Scope: scopeFor(*org), Name: *name, Cron: *cronExpr, TZ: *tz, JobType: *jobType,
				Payload: *payload, Priority: *priority, Jitter: *jitter, Missed: schedules.Missed(*missed),
				MissedMax: *missedMax, Active: *active,
			}
			res, err := validatedCall(ctx, inv, req, schedules.Upsert)
			if err != nil {
				return nil, err
			}
			return scheduleResult{Outcome: "schedule", Disposition: res.Disposition, Schedule: scheduleView(res.Schedule)}, nil
		}
	},
}

var schedulesListCmd = &command{
	name:    "schedules list",
	summary: "List the schedules of a scope.",
	help: `Lists the schedules of the scope (--org, default global) by name, at
most 1000.

Output (--json):
  {"schedules":[{S}, ...]}
` + scheduleOutputHelp + `

Exit codes: 0 done; 2 invalid input; 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		org := fs.uuidFlag("org", "`UUID`: the organization (tenant). Default: global scope.")
		return func(ctx context.Context, inv *invocation) (result, error) {
			pool, err := inv.Pool(ctx)
			if err != nil {
				return nil, err
			}
			list, err := schedules.List(ctx, pool, scopeFor(*org), 1000)
			if err != nil {
				return nil, err
			}
			out := scheduleListResult{Schedules: make([]scheduleJSON, 0, len(list))}
			for _, s := range list {
				out.Schedules = append(out.Schedules, scheduleView(s))
			}
			return out, nil
		}
	},
}

// scheduleByName is the shape of show, pause, resume and delete.
func scheduleByName(verb, summary, help string, op func(ctx context.Context, inv *invocation, name string, org *uuid.UUID) (schedules.Schedule, error)) *command {
	return &command{
		name:    "schedules " + verb,
		summary: summary,
		help: help + `

Output (--json):
  {"outcome":"schedule","schedule":{S}}
` + scheduleOutputHelp + `

Exit codes: 0 done; 2 invalid input; 4 no schedule N in the scope;
1 other errors.`,
		setup: func(fs *flagSet) runFunc {
			name := fs.str("name", "`N`: the schedule's name.")
			fs.requireFlag("name")
			org := fs.uuidFlag("org", "`UUID`: the organization (tenant). Default: global scope.")
			return func(ctx context.Context, inv *invocation) (result, error) {
				if err := schedules.ValidateRef(scopeFor(*org), *name); err != nil {
					return nil, err
				}
				s, err := op(ctx, inv, *name, *org)
				if err != nil {
					return nil, err
				}
				return scheduleResult{Outcome: "schedule", Schedule: scheduleView(s), verb: verb}, nil
			}
		},
	}
}

var (
	schedulesShowCmd = scheduleByName("show", "Show a schedule.",
		`Prints the schedule N of the scope (--org, default global).`,
		func(ctx context.Context, inv *invocation, name string, org *uuid.UUID) (schedules.Schedule, error) {
			pool, err := inv.Pool(ctx)
			if err != nil {
				return schedules.Schedule{}, err
			}
			return schedules.Get(ctx, pool, scopeFor(org), name)
		})
	schedulesPauseCmd = scheduleByName("pause", "Pause a schedule (durably).",
		`Pauses the schedule N: no worker fires it until it is resumed. Pausing a
paused schedule changes nothing. It waits for a fire of the schedule under
way, so none is running when it returns.`,
		func(ctx context.Context, inv *invocation, name string, org *uuid.UUID) (schedules.Schedule, error) {
			pool, err := inv.Pool(ctx)
			if err != nil {
				return schedules.Schedule{}, err
			}
			return schedules.Pause(ctx, pool, scopeFor(org), name)
		})
	schedulesResumeCmd = scheduleByName("resume", "Resume a paused schedule.",
		`Resumes the schedule N from its next tick after now: ticks that passed
while it was paused never fire. Resuming an active schedule changes
nothing.`,
		func(ctx context.Context, inv *invocation, name string, org *uuid.UUID) (schedules.Schedule, error) {
			pool, err := inv.Pool(ctx)
			if err != nil {
				return schedules.Schedule{}, err
			}
			return schedules.Resume(ctx, pool, scopeFor(org), name)
		})
	schedulesDeleteCmd = scheduleByName("delete", "Delete a schedule.",
		`Deletes the schedule N and prints it as it was. Jobs it fired stay.`,
		func(ctx context.Context, inv *invocation, name string, org *uuid.UUID) (schedules.Schedule, error) {
			pool, err := inv.Pool(ctx)
			if err != nil {
				return schedules.Schedule{}, err
			}
			return schedules.Delete(ctx, pool, scopeFor(org), name)
		})
)
