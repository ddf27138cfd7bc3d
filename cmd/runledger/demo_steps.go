package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/goose"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/replay"
)

// The demo's story, one method a step, in the order runDemo calls them:
// each prints the command that does it and checks the outcome it shows.

func (d *demo) migrate() error {
	return d.step("migrate", "Migrate the schema", "runledger migrate up", func(w io.Writer) error {
		db, err := openSQL(d.ctx, d.db.URL)
		if err != nil {
			return err
		}
		defer db.Close()
		applied, err := goose.UpResults(d.ctx, db)
		if err != nil {
			return migrateError(d.ctx, "migrate up", err)
		}
		current, latest, err := goose.Version(d.ctx, db)
		if err != nil {
			return migrateError(d.ctx, "read schema version", err)
		}
		if len(applied) == 0 {
			fmt.Fprintf(w, "Nothing to apply: the database is already at version %d.\n", current)
		} else {
			fmt.Fprintf(w, "Applied %s; the database is at version %d.\n", plural(len(applied), "migration"), current)
		}
		if current != latest {
			return failf("the database is at version %d, want %d", current, latest)
		}
		return nil
	})
}

func (d *demo) define() error {
	cmd := fmt.Sprintf("runledger definitions upsert --type %s --max-attempts 3", d.jobType)
	return d.step("define", "Define a job type", cmd, func(w io.Writer) error {
		def, err := jobs.UpsertDefinition(d.ctx, d.pool, jobs.DefinitionInput{JobType: d.jobType, MaxAttempts: ptr(int32(3))})
		if err != nil {
			return err
		}
		definitionResult{Definition: def}.text(w)
		if !def.Enabled || def.MaxAttempts != 3 || def.Version != 1 {
			return failf("want an enabled type at version 1 with 3 attempts")
		}
		return nil
	})
}

func (d *demo) enqueue() error {
	payload := `{"invoice":1042,"to":"ap@tenant-a.example"}`
	cmd := fmt.Sprintf("runledger enqueue --type %s --org %s --payload %s", d.jobType, d.tenantA, shellQuote(payload))
	return d.step("enqueue", "Enqueue a job for tenant A", cmd, func(w io.Writer) error {
		res, err := jobs.Enqueue(d.ctx, d.pool, jobs.EnqueueRequest{
			Scope: runledger.Organization(d.tenantA), JobType: d.jobType, Payload: json.RawMessage(payload),
		})
		if err != nil {
			return err
		}
		d.source = res.Job
		fmt.Fprintf(w, "Enqueued job %s (%s): %s at run %d, attempt %d of %d.\n",
			res.Job.ID, res.Disposition, res.Job.Status, res.Job.RunNumber, res.Job.Attempt, res.Job.MaxAttempts)
		if res.Disposition != runledger.DispositionInserted || res.Job.Status != runledger.JobStatusPending {
			return failf("want a new PENDING job")
		}
		return nil
	})
}

// replayRequest is a replay of the demo's source job.
func (d *demo) replayRequest(scope uuid.UUID, run int32, reason string) (replay.Request, string) {
	req := replay.Request{
		Scope: runledger.Organization(scope), SourceJobID: d.source.ID, ExpectedRunNumber: run,
		Key: d.key, Reason: reason,
	}
	cmd := fmt.Sprintf("runledger replay --job %s --run %d --key %s --reason %s --org %s",
		req.SourceJobID, run, shellQuote(req.Key), shellQuote(reason), scope)
	return req, cmd
}

// replayOutcome runs a replay and prints its outcome as the replay command
// does, with the exit code it would have.
func (d *demo) replayOutcome(w io.Writer, req replay.Request) (replay.Outcome, error) {
	out, err := replay.SucceededJob(d.ctx, d.pool, req)
	if err != nil {
		return nil, err
	}
	res := replayResult(req, out)
	var b bytes.Buffer
	res.text(&b)
	line, _, _ := strings.Cut(b.String(), "\n")
	code := exitOK
	if ec, ok := res.(exitCoder); ok {
		code = ec.exitCode()
	}
	fmt.Fprintf(w, "%s\n(exit %d)\n", line, code)
	return out, nil
}

func (d *demo) replayInserted() error {
	req, cmd := d.replayRequest(d.tenantA, d.source.RunNumber, d.reason)
	return d.step("replay", "Replay the succeeded job (compare-and-replay)", cmd, func(w io.Writer) error {
		out, err := d.replayOutcome(w, req)
		if err != nil {
			return err
		}
		r, ok := out.(replay.Replayed)
		if !ok || r.Disposition != runledger.DispositionInserted {
			return failf("want replayed with disposition inserted, got %T", out)
		}
		if r.Replay.JobID == d.source.ID || r.Replay.Status != runledger.JobStatusPending || r.Replay.RunNumber != 1 {
			return failf("want a new PENDING job at run 1")
		}
		d.replayID = r.Replay.JobID
		return nil
	})
}

func (d *demo) replayExisting() error {
	req, cmd := d.replayRequest(d.tenantA, d.source.RunNumber, d.reason)
	return d.step("replay_retry", "Retry the same replay (idempotent: the same job back)", cmd, func(w io.Writer) error {
		out, err := d.replayOutcome(w, req)
		if err != nil {
			return err
		}
		r, ok := out.(replay.Replayed)
		if !ok || r.Disposition != runledger.DispositionExisting || r.Replay.JobID != d.replayID {
			return failf("want replayed with disposition existing and job %s", d.replayID)
		}
		return nil
	})
}

func (d *demo) replayConflict() error {
	req, cmd := d.replayRequest(d.tenantA, d.source.RunNumber, "a different reason")
	return d.step("replay_conflict", "Reuse the key with another reason (conflict)", cmd, func(w io.Writer) error {
		_, err := replay.SucceededJob(d.ctx, d.pool, req)
		if !errors.Is(err, runledger.CodeReplayIdempotencyConflict) {
			if err != nil {
				return err
			}
			return failf("want an idempotency conflict, got an outcome")
		}
		code, category, message, _ := describe(err)
		fmt.Fprintf(w, "Refused: %s (%s, category %s)\n(exit %d)\n", message, code, category, exitCode(err))
		if exitCode(err) != exitConflict {
			return failf("want exit %d", exitConflict)
		}
		return nil
	})
}

func (d *demo) replayStaleRun() error {
	req, cmd := d.replayRequest(d.tenantA, d.source.RunNumber+1, d.reason)
	return d.step("replay_mismatch", "Replay with a stale run number (expectation mismatch)", cmd, func(w io.Writer) error {
		out, err := d.replayOutcome(w, req)
		if err != nil {
			return err
		}
		m, ok := out.(replay.ExpectationMismatch)
		if !ok || m.Actual.ID != d.source.ID || m.Actual.Status != runledger.JobStatusSucceeded || m.Actual.RunNumber != d.source.RunNumber {
			return failf("want an expectation mismatch showing the job SUCCEEDED at run %d", d.source.RunNumber)
		}
		return nil
	})
}

func (d *demo) replayOtherTenant() error {
	req, cmd := d.replayRequest(d.tenantB, d.source.RunNumber, d.reason)
	return d.step("replay_other_tenant", "Tenant B tries to replay tenant A's job (not found)", cmd, func(w io.Writer) error {
		out, err := d.replayOutcome(w, req)
		if err != nil {
			return err
		}
		if _, ok := out.(replay.NotFound); !ok {
			return failf("want not_found: another tenant's job must stay invisible")
		}
		return nil
	})
}

func (d *demo) lineage() error {
	cmd := fmt.Sprintf("runledger jobs show %s --org %s", d.source.ID, d.tenantA)
	return d.step("lineage", "The lineage, as 'runledger jobs show' shows it", cmd, func(w io.Writer) error {
		src, err := showJob(d.ctx, d.pool, inspect.DetailRequest{Scope: runledger.Organization(d.tenantA), JobID: d.source.ID})
		if err != nil {
			return err
		}
		src.text(w)
		rep, err := showJob(d.ctx, d.pool, inspect.DetailRequest{Scope: runledger.Organization(d.tenantA), JobID: d.replayID})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n$ runledger jobs show %s --org %s\n", d.replayID, d.tenantA)
		rep.text(w)

		var types []string
		for _, e := range src.Events {
			types = append(types, string(e.EventType))
		}
		switch {
		case strings.Join(types, ",") != "ENQUEUED,LEASED,SUCCEEDED":
			return failf("source events are %v, want ENQUEUED, LEASED, SUCCEEDED", types)
		case !src.Job.UpdatedAt.Equal(d.source.UpdatedAt) || src.Job.Status != runledger.JobStatusSucceeded:
			return failf("the replays changed the source job")
		case len(src.Replays) != 1 || src.Replays[0].ReplayJobID != d.replayID ||
			src.Replays[0].ReplayRequestKey != d.key || src.Replays[0].Reason != d.reason:
			return failf("want exactly one replay, %s, with the request's key and reason", d.replayID)
		case rep.ReplayedFrom == nil || rep.ReplayedFrom.SourceJobID != d.source.ID || rep.ReplayedFrom.SourceRunNumber != d.source.RunNumber:
			return failf("the replay does not point back to job %s run %d", d.source.ID, d.source.RunNumber)
		case rep.Job.Status != runledger.JobStatusSucceeded || !bytes.Equal(compactJSON(rep.Job.Payload), compactJSON(d.source.Payload)):
			return failf("the replay is not a SUCCEEDED run of the source's payload")
		}
		return nil
	})
}

// bulkRequest is the demo's bulk action: every SUCCEEDED job of the
// demo's type in tenant A, chunks of 2 to show more than one.
func (d *demo) bulkRequest() (replay.BulkRequest, string) {
	req := replay.BulkRequest{
		Scope: runledger.Organization(d.tenantA), Key: d.bulkKey, Reason: "invoices lost downstream during incident 42",
		Filter: &replay.Filter{JobType: d.jobType}, ChunkSize: 2,
	}
	cmd := fmt.Sprintf("runledger replay-bulk --type %s --org %s --key %s --reason %s --chunk 2",
		d.jobType, d.tenantA, shellQuote(req.Key), shellQuote(req.Reason))
	return req, cmd
}

// bulkOutcome runs the bulk action and prints its summary as replay-bulk
// does, with the exit code it would have.
func (d *demo) bulkOutcome(w io.Writer) (bulkOutput, error) {
	req, _ := d.bulkRequest()
	began := time.Now()
	chunks := 0
	sum, err := replay.Bulk(d.ctx, d.pool, req, func(replay.BulkChunk) error { chunks++; return nil })
	if err != nil {
		return bulkOutput{}, err
	}
	out := newBulkOutput(req, sum, chunks, time.Since(began))
	out.text(w)
	fmt.Fprintf(w, "(exit %d)\n", out.exitCode())
	return out, nil
}

func (d *demo) bulkReplay() error {
	_, cmd := d.bulkRequest()
	return d.step("bulk_replay", "Bulk-replay every succeeded job of the type (one action, by filter)", cmd, func(w io.Writer) error {
		// Three more invoices go out and the worker runs them, so that the
		// filter finds five succeeded jobs: four invoices and the replay.
		for i := range 3 {
			res, err := jobs.Enqueue(d.ctx, d.pool, jobs.EnqueueRequest{
				Scope: runledger.Organization(d.tenantA), JobType: d.jobType,
				Payload: json.RawMessage(fmt.Sprintf(`{"invoice":%d,"to":"ap@tenant-a.example"}`, 1043+i)),
			})
			if err != nil {
				return err
			}
			if _, err := d.waitRan(res.Job.ID); err != nil {
				return err
			}
		}
		fmt.Fprintln(w, "(Three more invoices were enqueued and run by the worker first: tenant A now has 5 SUCCEEDED jobs of the type, the replay among them.)")
		out, err := d.bulkOutcome(w)
		if err != nil {
			return err
		}
		if out.Selected != 5 || out.Inserted != 5 || out.exitCode() != exitOK {
			return failf("want 5 selected and 5 inserted, got %d selected, %d inserted", out.Selected, out.Inserted)
		}
		return nil
	})
}

func (d *demo) bulkReplayAgain() error {
	_, cmd := d.bulkRequest()
	return d.step("bulk_replay_again", "Run the same bulk action again (idempotent: all existing)", cmd, func(w io.Writer) error {
		out, err := d.bulkOutcome(w)
		if err != nil {
			return err
		}
		if out.Selected != 5 || out.Existing != 5 || out.Inserted != 0 || out.exitCode() != exitOK {
			return failf("want 5 selected, all existing, got %d selected, %d existing, %d inserted", out.Selected, out.Existing, out.Inserted)
		}
		return nil
	})
}

func compactJSON(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}
