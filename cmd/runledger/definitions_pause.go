package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/jobs"
)

var definitionsPauseCmd = pauseCommand("pause", true)
var definitionsResumeCmd = pauseCommand("resume", false)

// pauseCommand is `definitions pause` (paused true) or `definitions
// resume`.
func pauseCommand(verb string, paused bool) *command {
	op, summary, what := jobs.ResumeType, "Resume a paused job type: workers claim its jobs again.",
		`Resumes the job type T: the next claims lease its due jobs again, in the
usual order (priority, then due time). Resuming a type that is not paused
changes nothing.`
	if paused {
		op, summary, what = jobs.PauseType, "Pause a job type: workers stop claiming its jobs; enqueues are still accepted.",
			`Pauses the job type T: from the next claim on (a worker's within its poll
interval) no job of T is leased; its jobs stay PENDING, enqueues and
replays of T are still accepted, and jobs already running finish. The pause
is stored with the definition, so it lasts across restarts until
'runledger definitions resume'. Pausing a paused type changes nothing.`
	}
	return &command{
		name:    "definitions " + verb,
		summary: summary,
		help: what + `

Output (--json):
  {"outcome":"definition","job_type":"T","paused":true|false}

Exit codes: 0 done; 2 invalid job type; 4 no definition for T; 1 other
errors.`,
		setup: func(fs *flagSet) runFunc {
			jobType := fs.str("type", "`T`: the job type.")
			fs.requireFlag("type")
			return func(ctx context.Context, inv *invocation) (result, error) {
				def, err := validatedCall(ctx, inv, jobTypeArg(*jobType), func(ctx context.Context, pool *pgxpool.Pool, t jobTypeArg) (jobs.Definition, error) {
					return op(ctx, pool, string(t))
				})
				if err != nil {
					return nil, err
				}
				return pauseResult{Outcome: "definition", JobType: def.JobType, Paused: def.Paused}, nil
			}
		},
	}
}

// jobTypeArg is a --type value, validated as a definition's job type
// before any database work.
type jobTypeArg string

func (t jobTypeArg) Validate() error { return jobs.DefinitionInput{JobType: string(t)}.Validate() }

type pauseResult struct {
	Outcome string `json:"outcome"`
	JobType string `json:"job_type"`
	Paused  bool   `json:"paused"`
}

func (r pauseResult) text(w io.Writer) {
	if r.Paused {
		fmt.Fprintf(w, "Job type %s is paused: workers do not claim its jobs.\n", r.JobType)
		return
	}
	fmt.Fprintf(w, "Job type %s is not paused: workers claim its jobs.\n", r.JobType)
}
