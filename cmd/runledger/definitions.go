package main

import (
	"context"
	"fmt"
	"io"

	"github.com/runledger-go/runledger/jobs"
)

var definitionsUpsertCmd = &command{
	name:    "definitions upsert",
	summary: "Create a job type or change its defaults.",
	help: `Creates the job type T or updates its settings. A flag left out keeps the
stored value; on creation it takes the default (8 attempts, 900 seconds,
priority 100, enabled). The version goes up by one whenever a setting
actually changes, so repeating an upsert is harmless. Jobs already enqueued
keep the settings they were given; a disabled type refuses new enqueues
and replays.

Output (--json):
  {"definition":{"job_type":"T","version":1,"max_attempts":8,"default_timeout_seconds":900,
   "default_priority":100,"enabled":true,"paused":false,"created_at":"...","updated_at":"..."}}

Exit codes: 0 done; 2 invalid input (blank type, non-positive attempts or
timeout); 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		jobType := fs.str("type", "`T`: the job type's name, stored as given.")
		fs.requireFlag("type")
		maxAttempts := fs.int32Opt("max-attempts", "`N`: attempts a job of this type gets by default (at least 1).")
		timeout := fs.int32Opt("timeout-seconds", "`N`: default per-attempt timeout in seconds (at least 1).")
		priority := fs.int32Opt("priority", "`N`: default priority, any integer; higher is claimed first.")
		enabled := fs.boolOpt("enabled", "Whether new jobs of this type may be enqueued or replayed (--enabled=false disables the type; existing jobs are untouched).")
		return func(ctx context.Context, inv *invocation) (result, error) {
			in := jobs.DefinitionInput{
				JobType:        *jobType,
				MaxAttempts:    *maxAttempts,
				TimeoutSeconds: *timeout,
				Priority:       *priority,
				Enabled:        *enabled,
			}
			def, err := validatedCall(ctx, inv, in, jobs.UpsertDefinition)
			if err != nil {
				return nil, err
			}
			return definitionResult{Definition: def}, nil
		}
	},
}

type definitionResult struct {
	Definition jobs.Definition `json:"definition"`
}

func (r definitionResult) text(w io.Writer) {
	fmt.Fprint(w, "Defined ")
	writeDefinition(w, r.Definition)
}
