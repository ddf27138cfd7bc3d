package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/worker"
)

// The demo's jobs run on a real worker (package worker) in this process:
// started once, it runs the invoice jobs, the replays and the bulk replays
// as they become due, and is stopped gracefully before the server.

// demoWorker is the running worker and what it reported.
type demoWorker struct {
	w        *worker.Worker
	stop     context.CancelFunc
	done     chan error
	finished chan worker.Finished
	seen     map[uuid.UUID]worker.Finished
	ran      int
}

// invoicePayload is what the demo's job type carries.
type invoicePayload struct {
	Invoice int    `json:"invoice"`
	To      string `json:"to"`
}

// sendInvoice is the demo's handler: it "sends" the invoice and says so
// in the job's output.
func sendInvoice(_ context.Context, j worker.Job[invoicePayload]) (any, error) {
	return map[string]any{"sent": true, "invoice": j.Payload.Invoice}, nil
}

// demoWaitTimeout bounds how long the demo waits for the worker to run a job.
const demoWaitTimeout = 30 * time.Second

func (d *demo) startWorker() error {
	return d.step("worker_start", "Start a worker (package worker) that runs the invoice jobs", "", func(w io.Writer) error {
		dw := &demoWorker{finished: make(chan worker.Finished, 1024), done: make(chan error, 1), seen: map[uuid.UUID]worker.Finished{}}
		wk, err := worker.New(d.pool, worker.Config{
			WorkerID:    d.worker,
			Concurrency: 10,
			Lease:       30 * time.Second,
			Logger:      slog.New(slog.DiscardHandler),
			OnFinished:  func(f worker.Finished) { dw.finished <- f },
		})
		if err != nil {
			return err
		}
		if err := worker.Register(wk, d.jobType, sendInvoice); err != nil {
			return err
		}
		if err := worker.Register(wk, d.chargeType, d.captureCharge); err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.WithoutCancel(d.ctx))
		dw.w, dw.stop = wk, cancel
		go func() { dw.done <- wk.Run(ctx) }()
		d.wk = dw
		fmt.Fprintf(w, "worker.New(pool, worker.Config{WorkerID: %q, Concurrency: 10, Lease: 30s})\n", d.worker)
		fmt.Fprintf(w, "worker.Register(w, %q, sendInvoice)   // returns {\"sent\":true,\"invoice\":N}\n", d.jobType)
		fmt.Fprintf(w, "worker.Register(w, %q, captureCharge) // fails while the payment provider is down\n", d.chargeType)
		fmt.Fprintln(w, "go w.Run(ctx)")
		fmt.Fprintln(w, "Running: it hears each committed enqueue (LISTEN/NOTIFY), claims, runs the handler, heartbeats, and completes.")
		return nil
	})
}

// waitRan waits until the worker reports the attempt of job id.
func (d *demo) waitRan(id uuid.UUID) (worker.Finished, error) {
	dw := d.wk
	if f, ok := dw.seen[id]; ok {
		return f, nil
	}
	t := time.NewTimer(demoWaitTimeout)
	defer t.Stop()
	for {
		select {
		case f := <-dw.finished:
			dw.ran++
			dw.seen[f.Job.ID] = f
			if f.Job.ID == id {
				return f, nil
			}
		case <-t.C:
			return worker.Finished{}, failf("the worker did not run job %s within %s", id, demoWaitTimeout)
		case <-d.ctx.Done():
			return worker.Finished{}, d.ctx.Err()
		}
	}
}

// workerRan prints what the worker did with a job, and checks it
// succeeded.
func (d *demo) workerRan(w io.Writer, id uuid.UUID) (runledger.Job, error) {
	f, err := d.waitRan(id)
	if err != nil {
		return runledger.Job{}, err
	}
	j := f.Job
	fmt.Fprintf(w, "The worker ran job %s (attempt %d) in %s: %s at run %d with output %s.\n",
		j.ID, j.Attempt, f.Duration.Round(time.Microsecond), j.Status, j.RunNumber, jsonText(j.Output))
	if f.Outcome != worker.OutcomeSucceeded || j.Status != runledger.JobStatusSucceeded {
		return j, failf("want the job SUCCEEDED, got %s (%v)", f.Outcome, f.Err)
	}
	return j, nil
}

func (d *demo) runSource() error {
	cmd := fmt.Sprintf("runledger jobs show %s --org %s", d.source.ID, d.tenantA)
	return d.step("worker_run", "The worker runs it", cmd, func(w io.Writer) error {
		j, err := d.workerRan(w, d.source.ID)
		if err != nil {
			return err
		}
		d.source = j
		return nil
	})
}

func (d *demo) runReplay() error {
	cmd := fmt.Sprintf("runledger jobs show %s --org %s", d.replayID, d.tenantA)
	return d.step("worker_run_replay", "The same worker runs the replay", cmd, func(w io.Writer) error {
		_, err := d.workerRan(w, d.replayID)
		return err
	})
}

// haltWorker stops the worker, if it still runs, without a step: when the
// story ended early or was interrupted.
func (d *demo) haltWorker() {
	if d.wk == nil || d.wk.stop == nil {
		return
	}
	d.wk.stop()
	<-d.wk.done
	d.wk.stop = nil
}

func (d *demo) stopWorker() error {
	return d.step("worker_stop", "Stop the worker (graceful shutdown)", "", func(w io.Writer) error {
		dw := d.wk
		dw.stop()
		err := <-dw.done
		dw.stop = nil
		if err != nil {
			return err
		}
		for {
			select {
			case f := <-dw.finished:
				dw.ran++
				dw.seen[f.Job.ID] = f
				continue
			default:
			}
			break
		}
		st := runledger.JobStatusLeased
		page, err := inspect.List(d.ctx, d.pool, inspect.ListRequest{Scope: runledger.Organization(d.tenantA), Status: &st, Limit: runledger.MaxLimit})
		if err != nil {
			return err
		}
		leased := len(page.Jobs)
		fmt.Fprintf(w, "The worker stopped claiming, finished what it ran and committed every outcome: %s run, %d left LEASED.\n",
			plural(dw.ran, "job"), leased)
		if leased != 0 {
			return failf("want no job left LEASED after a graceful shutdown")
		}
		return nil
	})
}
