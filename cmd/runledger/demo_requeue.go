package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/requeue"
	"github.com/runledger-go/runledger/worker"
)

// The demo's requeue story: a charge capture dead-letters while the
// payment provider is down, the operator requeues it once the provider is
// back, a retry of the same request is existing, and the worker runs it.

// chargePayload is what the demo's charge capture jobs carry.
type chargePayload struct {
	Charge string `json:"charge"`
}

// providerDownError is the capture handler's failure while the provider
// is down; its code becomes the job's last_error_code.
type providerDownError struct{}

func (providerDownError) Error() string     { return "payment provider unavailable" }
func (providerDownError) ErrorCode() string { return "provider.down" }

// captureCharge is the demo's second handler: it fails while the demo says
// the provider is down, and captures the charge once it is back.
func (d *demo) captureCharge(_ context.Context, j worker.Job[chargePayload]) (any, error) {
	if d.providerDown.Load() {
		return nil, providerDownError{}
	}
	return map[string]any{"captured": true, "charge": j.Payload.Charge}, nil
}

// requeueRequest is the operator's requeue of the dead-lettered capture,
// with the command line that sends it.
func (d *demo) requeueRequest() (requeue.Request, string) {
	req := requeue.Request{Scope: runledger.Organization(d.tenantA), JobID: d.charge.ID, ExpectedStatus: requeue.DeadLettered,
		ExpectedRunNumber: d.charge.RunNumber, Reason: "payment provider is back after incident 43"}
	cmd := fmt.Sprintf("runledger requeue --job %s --status DEAD_LETTERED --run %d --org %s --reason %s",
		req.JobID, req.ExpectedRunNumber, d.tenantA, shellQuote(req.Reason))
	return req, cmd
}

func (d *demo) chargeDeadLetters() error {
	cmd := fmt.Sprintf("runledger enqueue --type %s --org %s --max-attempts 1 --payload '{\"charge\":\"ch_1042\"}'", d.chargeType, d.tenantA)
	return d.step("requeue_dead_letter", "A charge capture dead-letters while the payment provider is down", cmd, func(w io.Writer) error {
		if _, err := jobs.UpsertDefinition(d.ctx, d.pool, jobs.DefinitionInput{JobType: d.chargeType, MaxAttempts: ptr(int32(1))}); err != nil {
			return err
		}
		res, err := jobs.Enqueue(d.ctx, d.pool, jobs.EnqueueRequest{Scope: runledger.Organization(d.tenantA), JobType: d.chargeType,
			Payload: json.RawMessage(`{"charge":"ch_1042"}`)})
		if err != nil {
			return err
		}
		f, err := d.waitRanAt(res.Job.ID, 1)
		if err != nil {
			return err
		}
		d.charge = f.Job
		fmt.Fprintf(w, "The worker ran job %s (a %s, one attempt allowed): the provider answered \"unavailable\", so the attempt failed and the job is %s at run %d (last error %s).\n",
			f.Job.ID, d.chargeType, f.Job.Status, f.Job.RunNumber, textOr(f.Job.LastErrorCode, "none"))
		if f.Outcome != worker.OutcomeDeadLettered || f.Job.Status != runledger.JobStatusDeadLettered {
			return failf("want the job DEAD_LETTERED, got %s (%s)", f.Job.Status, f.Outcome)
		}
		return nil
	})
}

func (d *demo) requeueDeadLettered() error {
	req, cmd := d.requeueRequest()
	return d.step("requeue", "The provider is back: requeue the dead-lettered job (compare-and-requeue)", cmd, func(w io.Writer) error {
		d.providerDown.Store(false)
		out, err := requeue.Job(d.ctx, d.pool, req)
		if err != nil {
			return err
		}
		requeueResult(req, out).text(w)
		r, ok := out.(requeue.Requeued)
		if !ok || r.Disposition != runledger.DispositionInserted || r.After.ID != d.charge.ID || r.After.RunNumber != 2 {
			return failf("want the same job requeued (inserted) at run 2, got %T", out)
		}
		return nil
	})
}

func (d *demo) requeueExisting() error {
	req, cmd := d.requeueRequest()
	return d.step("requeue_existing", "Retry the same requeue (idempotent: existing, nothing written)", cmd, func(w io.Writer) error {
		out, err := requeue.Job(d.ctx, d.pool, req)
		if err != nil {
			return err
		}
		r, ok := out.(requeue.Requeued)
		if !ok {
			return failf("want requeued (existing), got %T", out)
		}
		fmt.Fprintf(w, "Requeued (existing): run %d of job %s was already requeued with this reason; nothing was written. The job is %s at run %d.\n",
			req.ExpectedRunNumber, r.After.ID, r.After.Status, r.After.RunNumber)
		if r.Disposition != runledger.DispositionExisting || r.Before != nil || r.EventID != nil {
			return failf("want disposition existing with nothing written, got %s", r.Disposition)
		}
		return nil
	})
}

func (d *demo) runRequeued() error {
	cmd := fmt.Sprintf("runledger jobs show %s --org %s", d.charge.ID, d.tenantA)
	return d.step("worker_run_requeued", "The worker runs the requeued job; 'jobs show' lists the requeue", cmd, func(w io.Writer) error {
		f, err := d.waitRanAt(d.charge.ID, 2)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "The worker ran job %s again (run %d, attempt %d): %s with output %s.\n",
			f.Job.ID, f.Job.RunNumber, f.Job.Attempt, f.Job.Status, jsonText(f.Job.Output))
		if f.Outcome != worker.OutcomeSucceeded || f.Job.Status != runledger.JobStatusSucceeded {
			return failf("want the requeued job SUCCEEDED, got %s (%s)", f.Job.Status, f.Outcome)
		}
		hist, err := requeue.History(d.ctx, d.pool, runledger.Organization(d.tenantA), d.charge.ID)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "Requeue history (%d):\n", len(hist))
		writeRequeues(w, hist, "  ")
		if len(hist) != 1 || hist[0].FromRunNumber != 1 {
			return failf("want one requeue, from run 1")
		}
		return nil
	})
}

// waitRanAt waits until the worker reports an attempt of job id at run.
func (d *demo) waitRanAt(id uuid.UUID, run int32) (worker.Finished, error) {
	dw := d.wk
	if f, ok := dw.seen[id]; ok && f.Job.RunNumber == run {
		return f, nil
	}
	t := time.NewTimer(demoWaitTimeout)
	defer t.Stop()
	for {
		select {
		case f := <-dw.finished:
			dw.ran++
			dw.seen[f.Job.ID] = f
			if f.Job.ID == id && f.Job.RunNumber == run {
				return f, nil
			}
		case <-t.C:
			return worker.Finished{}, failf("the worker did not run job %s at run %d within %s", id, run, demoWaitTimeout)
		case <-d.ctx.Done():
			return worker.Finished{}, d.ctx.Err()
		}
	}
}

// textOr is *s, or def when s is nil.
func textOr(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}
