package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/lease"
)

var claimCmd = &command{
	name:    "claim",
	summary: "Lease due jobs to a worker.",
	help: `Leases up to --limit due PENDING jobs to worker W, highest priority first,
then by due time and age. Each becomes LEASED at the next attempt, with a
lease that expires after --lease; the worker finishes it with 'runledger
complete' or 'runledger fail', repeating the job id, run, attempt and
worker printed here. Jobs locked by another transaction are skipped, never
waited for; no due job is not an error (an empty list, exit 0).

Output (--json):
  {"jobs":[{<job>}, ...]}
with the job fields listed in 'runledger help enqueue'.

Exit codes: 0 done (even with no job); 2 invalid input; 1 other errors.`,
	setup: func(fs *flagSet) runFunc {
		worker := fs.str("worker", "`W`: the worker id; complete and fail must repeat it.")
		fs.requireFlag("worker")
		types := fs.jobTypes("type", "`T`: claim only jobs of this type, taken exactly as given (not trimmed); repeat the flag or separate types with commas. Default: every type.")
		limit := fs.intDefault("limit", 1, "`N`: the most jobs to lease, 1 to 1000.")
		leaseFor := fs.duration("lease", 30*time.Second, "`D`: how long the worker holds each job, as a Go duration (30s, 5m, 1h30m).")
		return func(ctx context.Context, inv *invocation) (result, error) {
			req := lease.ClaimRequest{WorkerID: *worker, JobTypes: *types, Limit: int(*limit), Lease: *leaseFor}
			leased, err := validatedCall(ctx, inv, req, lease.Claim)
			if err != nil {
				return nil, err
			}
			return claimResult{Jobs: leased, worker: *worker, lease: *leaseFor}, nil
		}
	},
}

type claimResult struct {
	Jobs   []runledger.Job `json:"jobs"`
	worker string
	lease  time.Duration
}

func (r claimResult) text(w io.Writer) {
	if len(r.Jobs) == 0 {
		fmt.Fprintln(w, "No due jobs to claim.")
		return
	}
	fmt.Fprintf(w, "Leased %s to worker %s for %s.\n", plural(len(r.Jobs), "job"), r.worker, r.lease)
	for _, j := range r.Jobs {
		fmt.Fprintln(w)
		writeJob(w, j, "")
		fmt.Fprintf(w, "  finish with: runledger complete --job %s --run %d --attempt %d --worker %s\n",
			j.ID, j.RunNumber, j.Attempt, shellQuote(r.worker))
	}
}
