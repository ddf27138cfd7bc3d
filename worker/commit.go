package worker

import (
	"context"
	"errors"
	"time"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/jobs"
)

// Outcome is what became of one attempt.
type Outcome string

// The outcomes Finished reports.
const (
	// OutcomeSucceeded: the job completed with the handler's output.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRetried: the attempt failed and the job is due again.
	OutcomeRetried Outcome = "retried"
	// OutcomeDeadLettered: the attempt failed and the job is
	// dead-lettered (terminal, panicked, or no attempts left).
	OutcomeDeadLettered Outcome = "dead_lettered"
	// OutcomeLost: the worker no longer held the lease (the job was
	// canceled, or the lease expired and another attempt may run); nothing
	// was written for the attempt. Also an attempt whose outcome could not
	// be written before the hard stop of a shutdown (see ShutdownGrace):
	// its job stays LEASED until a recovery takes it back, unless a write
	// whose reply was lost landed.
	OutcomeLost Outcome = "lost"
)

// Finished is what Config.OnFinished hears of an attempt, after its
// outcome was committed.
type Finished struct {
	// Job is the job as stored after the outcome; for OutcomeLost, as it
	// was claimed.
	Job     runledger.Job
	Outcome Outcome
	// Kind is the failure kind of a failed attempt; "" on success or loss.
	Kind runledger.FailureKind
	// Err is the handler's error (or panic, or why the lease was lost);
	// nil on success.
	Err error
	// Duration is how long the handler ran.
	Duration time.Duration
}

// commit records the attempts' outcomes as they come, in batches (what
// arrived while the previous batch was being written, up to 1,000), until
// drain is closed and nothing is left.
func (r *run) commit() {
	for {
		var batch []*execution
		select {
		case e := <-r.outcomes:
			batch = append(batch, e)
		case <-r.drain:
			// Shutting down: whatever is left, then stop.
			for {
				select {
				case e := <-r.outcomes:
					batch = append(batch, e)
					if len(batch) == maxClaim {
						r.flush(batch)
						batch = nil
					}
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				r.flush(batch)
			}
			return
		}
	more:
		for len(batch) < maxClaim {
			select {
			case e := <-r.outcomes:
				batch = append(batch, e)
			default:
				break more
			}
		}
		r.flush(batch)
	}
}

// flush writes one batch of outcomes (completions in one statement,
// failures in another), retrying what failed for reasons that may pass
// while the leases last, then reports each.
func (r *run) flush(batch []*execution) {
	var done, failed []*execution
	for _, e := range batch {
		switch {
		case e.lost.Load():
			r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errLeaseLost, Duration: e.duration})
		case e.failure == nil:
			done = append(done, e)
		default:
			failed = append(failed, e)
		}
	}
	if len(done) > 0 {
		r.write(done, func(ctx context.Context, es []*execution) ([]jobs.Result[runledger.Job], error) {
			reqs := make([]jobs.CompleteRequest, len(es))
			for i, e := range es {
				e.mu.Lock()
				reqs[i] = jobs.CompleteRequest{Scope: &e.scope, JobID: e.job.ID, RunNumber: e.job.RunNumber, Attempt: e.job.Attempt,
					WorkerID: r.cfg.WorkerID, Output: e.output, ProgressDone: e.progressDone, ProgressTotal: e.progressTotal}
				e.mu.Unlock()
			}
			return jobs.CompleteMany(ctx, r.pool, reqs)
		})
	}
	if len(failed) > 0 {
		r.write(failed, func(ctx context.Context, es []*execution) ([]jobs.Result[runledger.Job], error) {
			reqs := make([]jobs.FailRequest, len(es))
			for i, e := range es {
				f := *e.failure
				f.Scope, f.JobID, f.RunNumber, f.Attempt, f.WorkerID = &e.scope, e.job.ID, e.job.RunNumber, e.job.Attempt, r.cfg.WorkerID
				reqs[i] = f
			}
			return jobs.FailMany(ctx, r.pool, reqs)
		})
	}
}

// write runs a batch write until every entry is settled: written, or
// refused (the lease is not held: lost). A failure that wrote nothing
// (transient) is retried; one whose outcome is unknown is resolved by
// reading the jobs back, and only what did not land is retried. A retry
// refused for an entry whose earlier write was unconfirmed is read back
// too: the refusal may be that write, landed. An entry whose lease ran out
// meanwhile is lost. Each try is bounded by the end of the batch's last
// lease (past it every entry is lost anyway); at the hard stop of a
// shutdown what is left is given up.
func (r *run) write(es []*execution, op func(context.Context, []*execution) ([]jobs.Result[runledger.Job], error)) {
	var bo backoff
	var unsure map[*execution]bool // entries an unconfirmed write may have written
	for len(es) > 0 {
		ctx, cancel := r.bounded(lastLeaseEnd(es))
		results, err := op(ctx, es)
		cancel()
		if err == nil {
			var recheck []*execution
			for i, res := range results {
				if res.Err != nil && unsure[es[i]] {
					recheck = append(recheck, es[i])
					continue
				}
				r.report(es[i], res.Value, res.Err)
			}
			if len(recheck) == 0 {
				return
			}
			es = r.resolve(recheck)
		} else {
			r.log.Warn("runledger worker: recording outcomes failed; retrying", "worker_id", r.cfg.WorkerID, "jobs", len(es), "err", err)
			if errors.Is(err, runledger.ErrCommitUnconfirmed) {
				if unsure == nil {
					unsure = map[*execution]bool{}
				}
				for _, e := range es {
					unsure[e] = true
				}
				es = r.resolve(es)
			}
		}
		var left []*execution
		for _, e := range es {
			if e.lost.Load() || time.Now().After(e.leaseEnd()) {
				e.lost.Store(true)
				r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errLeaseLost, Duration: e.duration})
				continue
			}
			left = append(left, e)
		}
		es = left
		if len(es) > 0 && (r.db.Err() != nil || !sleep(r.db.Done(), bo.next())) {
			r.giveUp(es)
			return
		}
	}
}

// giveUp reports as lost the attempts whose outcome could not be written
// before the hard stop of a shutdown: their jobs stay LEASED until their
// leases expire and a recovery takes them back (or an unconfirmed write
// landed after all).
func (r *run) giveUp(es []*execution) {
	r.log.Error("runledger worker: the shutdown's time ran out before these outcomes could be written; their jobs are recovered when their leases expire",
		"worker_id", r.cfg.WorkerID, "jobs", len(es))
	for _, e := range es {
		e.lost.Store(true)
		r.finish(e, Finished{Job: e.job, Outcome: OutcomeLost, Err: errShutdownDeadline, Duration: e.duration})
	}
}

// lastLeaseEnd is the latest lease end among es.
func lastLeaseEnd(es []*execution) time.Time {
	var until time.Time
	for _, e := range es {
		if t := e.leaseEnd(); t.After(until) {
			until = t
		}
	}
	return until
}

// resolve reads back the jobs of a batch whose commit is unconfirmed:
// those that show this worker's write at this attempt are reported
// written, those still leased at this attempt by this worker are returned
// to be written again, and the others (recovered, canceled, claimed
// again) are reported lost. The reads share one deadline: the batch's
// last lease end, at least a heartbeat interval from now.
func (r *run) resolve(es []*execution) []*execution {
	until := lastLeaseEnd(es)
	// A read-back may still find what landed, also past a lease's end.
	if floor := time.Now().Add(r.cfg.HeartbeatInterval); until.Before(floor) {
		until = floor
	}
	ctx, cancel := r.bounded(until)
	defer cancel()
	var left []*execution
	for _, e := range es {
		j, err := jobs.Get(ctx, r.pool, e.scope, e.job.ID)
		switch {
		case err != nil:
			left = append(left, e)
		case j.Status == runledger.JobStatusLeased && j.RunNumber == e.job.RunNumber && j.Attempt == e.job.Attempt &&
			j.WorkerID != nil && *j.WorkerID == r.cfg.WorkerID:
			left = append(left, e)
		case landed(e, j):
			r.report(e, j, nil)
		default:
			r.report(e, j, errLeaseLost)
		}
	}
	return left
}

// landed reports whether j, as read back, shows e's own write: at e's run
// and attempt, SUCCEEDED for a completion; for a failure, out of LEASED
// (PENDING or DEAD_LETTERED) with e's error code. A recovery at the same
// attempt records job.lease_expired, a cancel leaves it CANCELED.
func landed(e *execution, j runledger.Job) bool {
	if j.RunNumber != e.job.RunNumber || j.Attempt != e.job.Attempt {
		return false
	}
	if e.failure == nil {
		return j.Status == runledger.JobStatusSucceeded
	}
	return (j.Status == runledger.JobStatusPending || j.Status == runledger.JobStatusDeadLettered) &&
		j.LastErrorCode != nil && *j.LastErrorCode == e.failure.ErrorCode
}

// report turns a committed write of an attempt into its Finished.
func (r *run) report(e *execution, j runledger.Job, refused error) {
	f := Finished{Job: j, Err: e.err, Duration: e.duration}
	switch {
	case refused != nil:
		e.lost.Store(true)
		f.Job, f.Outcome, f.Err = e.job, OutcomeLost, refused
	case e.failure == nil:
		f.Outcome = OutcomeSucceeded
	default:
		f.Kind = e.failure.Kind
		f.Outcome = OutcomeRetried
		if j.Status == runledger.JobStatusDeadLettered {
			f.Outcome = OutcomeDeadLettered
		}
	}
	r.finish(e, f)
}

// finish forgets the attempt and tells OnFinished.
func (r *run) finish(e *execution, f Finished) {
	r.forget(e.job.ID)
	if f.Outcome == OutcomeLost {
		r.log.Warn("runledger worker: lost the lease of a job; nothing was written for its attempt",
			"worker_id", r.cfg.WorkerID, "job_id", e.job.ID, "job_type", e.job.JobType, "attempt", e.job.Attempt)
	}
	if r.cfg.OnFinished != nil {
		r.cfg.OnFinished(f)
	}
}

// leaseEnd is the worker's estimate of when the attempt's lease ends.
func (e *execution) leaseEnd() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leaseUntil
}
