package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/jobs"
)

// Human-readable rendering shared by the commands and the demo. JSON
// output never goes through here: it is the domain types' own encoding.

// humanTime prints a time in RFC 3339 UTC with milliseconds.
func humanTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// scopeText names a job's tenant.
func scopeText(org *uuid.UUID) string {
	if org == nil {
		return "global (no organization)"
	}
	return "organization " + org.String()
}

// writeJob prints a job as aligned "field  value" lines under a heading,
// leaving out fields that are not set.
func writeJob(w io.Writer, j runledger.Job, indent string) {
	fmt.Fprintf(w, "%sjob %s\n", indent, j.ID)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s  %s\t%s\n", indent, k, v) }
	row("type", j.JobType)
	row("scope", scopeText(j.OrganizationID))
	row("status", fmt.Sprintf("%s (stage %s)", j.Status, j.Stage))
	row("run", fmt.Sprintf("%d, attempt %d of %d", j.RunNumber, j.Attempt, j.MaxAttempts))
	row("priority", strconv.Itoa(int(j.Priority)))
	row("timeout", fmt.Sprintf("%ds per attempt", j.TimeoutSeconds))
	row("payload", jsonText(j.Payload))
	if j.Output != nil {
		row("output", jsonText(j.Output))
	}
	if j.Checkpoint != nil {
		row("checkpoint", jsonText(j.Checkpoint))
	}
	if j.ProgressDone != nil || j.ProgressTotal != nil {
		row("progress", progressText(j))
	}
	if j.WorkerID != nil {
		row("worker", *j.WorkerID)
	}
	if j.IdempotencyKey != nil {
		row("idempotency key", *j.IdempotencyKey)
	}
	if j.ExecutionResourceKey != nil {
		row("resource key", *j.ExecutionResourceKey)
	}
	if j.LastErrorCode != nil || j.LastErrorMessage != nil {
		var parts []string
		for _, p := range []*string{j.LastErrorCode, j.LastErrorMessage} {
			if p != nil && *p != "" {
				parts = append(parts, *p)
			}
		}
		row("last error", strings.Join(parts, ": "))
	}
	if j.StatusReason != nil {
		row("status reason", *j.StatusReason)
	}
	row("next run at", humanTime(j.NextRunAt))
	if j.LeaseExpiresAt != nil {
		row("lease expires", humanTime(*j.LeaseExpiresAt))
	}
	if j.LastHeartbeatAt != nil {
		row("last heartbeat", humanTime(*j.LastHeartbeatAt))
	}
	if j.StartedAt != nil {
		row("started at", humanTime(*j.StartedAt))
	}
	if j.FinishedAt != nil {
		row("finished at", humanTime(*j.FinishedAt))
	}
	row("created at", humanTime(j.CreatedAt))
	row("updated at", humanTime(j.UpdatedAt))
	_ = tw.Flush()
}

func progressText(j runledger.Job) string {
	s := fmt.Sprintf("%s of %s", int64Text(j.ProgressDone), int64Text(j.ProgressTotal))
	if j.ProgressPct != nil {
		s += fmt.Sprintf(" (%.1f%%)", *j.ProgressPct)
	}
	return s
}

func int64Text(p *int64) string {
	if p == nil {
		return "?"
	}
	return strconv.FormatInt(*p, 10)
}

// jsonText prints a stored JSON value compactly, "null" when absent.
func jsonText(raw json.RawMessage) string {
	if raw == nil {
		return "null"
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(raw); err != nil {
		return string(raw)
	}
	return strings.TrimSpace(b.String())
}

// writeDefinition prints a job type's stored settings in one sentence.
func writeDefinition(w io.Writer, d jobs.Definition) {
	state := "enabled"
	if !d.Enabled {
		state = "disabled"
	}
	if d.Paused {
		state += ", paused"
	}
	fmt.Fprintf(w, "job type %s, version %d: %s, max attempts %d, timeout %ds, default priority %d (updated %s)\n",
		d.JobType, d.Version, state, d.MaxAttempts, d.DefaultTimeoutSeconds, d.DefaultPriority, humanTime(d.UpdatedAt))
}

// writeEvents prints a job's history, one event a line.
func writeEvents(w io.Writer, events []runledger.JobEvent, indent string) {
	if len(events) == 0 {
		fmt.Fprintf(w, "%s(none)\n", indent)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%sOCCURRED AT\tRUN\tATTEMPT\tEVENT\tSTAGE\tPAYLOAD\n", indent)
	for _, e := range events {
		attempt, stage := "-", "-"
		if e.Attempt != nil {
			attempt = strconv.Itoa(int(*e.Attempt))
		}
		if e.Stage != nil {
			stage = string(*e.Stage)
		}
		payload := "-"
		if e.Payload != nil {
			payload = jsonText(e.Payload)
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%s\t%s\t%s\t%s\n", indent, humanTime(e.OccurredAt), e.RunNumber, attempt, e.EventType, stage, payload)
	}
	_ = tw.Flush()
}

// writeReplays prints the replays made from a job.
func writeReplays(w io.Writer, replays []runledger.ReplayLineage, indent string) {
	if len(replays) == 0 {
		fmt.Fprintf(w, "%s(none)\n", indent)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%sREPLAY JOB\tFROM RUN\tKEY\tREASON\tCREATED AT\tNOW\n", indent)
	for _, r := range replays {
		now := "?"
		if r.ReplayStatus != nil && r.ReplayRunNumber != nil {
			now = fmt.Sprintf("%s at run %d", *r.ReplayStatus, *r.ReplayRunNumber)
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%s\t%s\t%s\t%s\n", indent, r.ReplayJobID, r.SourceRunNumber,
			quoteIfNeeded(r.ReplayRequestKey), quoteIfNeeded(r.Reason), humanTime(r.CreatedAt), now)
	}
	_ = tw.Flush()
}

// writeReplayedFrom prints where a replay job came from.
func writeReplayedFrom(w io.Writer, from *runledger.ReplayLineage, indent string) {
	if from == nil {
		fmt.Fprintf(w, "%s(not a replay)\n", indent)
		return
	}
	fmt.Fprintf(w, "%sjob %s, run %d, key %s, reason %s, at %s\n", indent, from.SourceJobID, from.SourceRunNumber,
		quoteIfNeeded(from.ReplayRequestKey), quoteIfNeeded(from.Reason), humanTime(from.CreatedAt))
}

// quoteIfNeeded quotes text with spaces or unusual characters so that a
// column stays readable.
func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"'\\") || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}

// plural returns "1 job" or "2 jobs".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@=,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
