package rows_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/rows"
)

// The decoders turn strings read from the database into enums. These fuzz
// targets feed them arbitrary strings (and, for rows.Job and rows.Event,
// arbitrary field values) and check that a known spelling round-trips
// exactly, that anything else is the Internal job.invalid_* error of that
// enum (naming the value, never a silent default), and that nothing panics.
//
// Run one with: go test -run '^$' -fuzz '^FuzzParseEnums$' -fuzztime 10s ./internal/rows/

var (
	validStatuses = []string{"PENDING", "LEASED", "SUCCEEDED", "DEAD_LETTERED", "CANCELED"}
	validStages   = []string{"queued", "scheduled", "running", "completed"}
	validEvents   = []string{"ENQUEUED", "LEASED", "HEARTBEAT", "STAGE_CHANGED", "PROGRESS",
		"RETRY_SCHEDULED", "SUCCEEDED", "FAILED", "DEAD_LETTERED", "CANCELED", "REQUEUED"}
)

// The codes of undecodable persisted values.
const (
	codeInvalidStatus    runledger.Code = "job.invalid_status"
	codeInvalidStage     runledger.Code = "job.invalid_stage"
	codeInvalidEventType runledger.Code = "job.invalid_event_type"
)

var invalidMessages = map[runledger.Code]string{
	codeInvalidStatus:    "Job status in persisted row is invalid.",
	codeInvalidStage:     "Job stage in persisted row is invalid.",
	codeInvalidEventType: "Job event type in persisted row is invalid.",
}

func member(set []string, s string) bool {
	for _, v := range set {
		if v == s {
			return true
		}
	}
	return false
}

// checkDecode checks one decoder result against the enum's spellings: a
// member decodes to itself with no error; anything else is the Internal
// error with the enum's code, a fixed client message and a detail quoting
// the value.
func checkDecode(t *testing.T, what string, set []string, code runledger.Code, input, got string, err error) {
	t.Helper()
	if member(set, input) {
		if err != nil || got != input {
			t.Fatalf("%s %q: got %q, %v; want it back unchanged", what, input, got, err)
		}
		return
	}
	if got != "" {
		t.Fatalf("%s %q: invalid value decoded to %q", what, input, got)
	}
	checkInvalid(t, what, code, input, err)
}

func checkInvalid(t *testing.T, what string, code runledger.Code, input string, err error) {
	t.Helper()
	var e *runledger.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s %q: error %v (%T), want *runledger.Error %s", what, input, err, err, code)
	}
	if e.Code != code || e.Category != runledger.CategoryInternal {
		t.Fatalf("%s %q: %s/%s, want %s/internal", what, input, e.Code, e.Category, code)
	}
	// The client message is fixed text per code: it never echoes the
	// stored value.
	if want := invalidMessages[code]; e.Message != want {
		t.Fatalf("%s %q: client message %q, want %q", what, input, e.Message, want)
	}
	if want := fmt.Sprintf("%q", input); !bytes.Contains([]byte(e.Detail), []byte(want)) {
		t.Fatalf("%s %q: detail %q does not quote the value", what, input, e.Detail)
	}
	if runledger.IsTransient(err) || runledger.CategoryOf(err) != runledger.CategoryInternal {
		t.Fatalf("%s %q: category helpers disagree: %s", what, input, runledger.CategoryOf(err))
	}
}

func FuzzParseEnums(f *testing.F) {
	for _, set := range [][]string{validStatuses, validStages, validEvents} {
		for _, s := range set {
			f.Add(s)
		}
	}
	for _, s := range []string{"", " PENDING", "pending", "Queued", "SUCCEEDED\x00", "\xff", "LEASED ", "RUNNING"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := rows.ParseStatus(s)
		checkDecode(t, "status", validStatuses, codeInvalidStatus, s, string(st), err)
		st2, err2 := rows.Status(db.JobStatus(s))
		if st2 != st || runledger.CodeOf(err2) != runledger.CodeOf(err) {
			t.Fatalf("rows.Status(%q) = %q, %v; ParseStatus = %q, %v", s, st2, err2, st, err)
		}
		sg, err := rows.ParseStage(s)
		checkDecode(t, "stage", validStages, codeInvalidStage, s, string(sg), err)
		ev, err := rows.ParseEventType(s)
		checkDecode(t, "event type", validEvents, codeInvalidEventType, s, string(ev), err)
	})
}

// fuzzTime builds a time from fuzzed parts, in a fixed zone whose offset
// is at most ±18h (what PostgreSQL and Go both represent).
func fuzzTime(sec int64, nsec uint32, offsetMinutes int16) time.Time {
	off := int(offsetMinutes) % (18 * 60)
	// Keep the year within 1..9999 so the value is one timestamptz holds.
	const lo, hi = -62135596800, 253402300799
	span := int64(hi - lo)
	if sec < 0 {
		sec = -sec
	}
	sec = lo + sec%span
	return time.Unix(sec, int64(nsec%1_000_000_000)).In(time.FixedZone("fuzz", off*60))
}

func checkTime(t *testing.T, field string, in, out time.Time) {
	t.Helper()
	if !out.Equal(in) || out.Location() != time.UTC {
		t.Fatalf("%s: %v became %v (%v), want the same instant in UTC", field, in, out, out.Location())
	}
}

func checkTimePtr(t *testing.T, field string, in, out *time.Time) {
	t.Helper()
	if (in == nil) != (out == nil) {
		t.Fatalf("%s: nil-ness changed (%v -> %v)", field, in, out)
	}
	if in != nil {
		checkTime(t, field, *in, *out)
		if in == out {
			t.Fatalf("%s: the input pointer was handed out, not a UTC copy", field)
		}
	}
}

// samePtr reports whether two optional values are both nil or both set to
// equal values.
func samePtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func checkJSON(t *testing.T, field string, in, out []byte) {
	t.Helper()
	if (in == nil) != (out == nil) || !bytes.Equal(in, out) {
		t.Fatalf("%s: %q became %q", field, in, out)
	}
}

func FuzzJob(f *testing.F) {
	f.Add("SUCCEEDED", "completed", []byte("0123456789abcdef"), int64(1700000000), uint32(5), int16(120), uint16(0xffff), []byte(`{"a":1}`), int32(3), int64(8))
	f.Add("PENDING", "queued", []byte{}, int64(0), uint32(0), int16(0), uint16(0), []byte(nil), int32(1), int64(0))
	f.Add("LEASED", "running", []byte("x"), int64(-62135596800), uint32(999999999), int16(-1080), uint16(0x5555), []byte(`[]`), int32(-1), int64(-5))
	f.Add("succeeded", "completed", []byte("y"), int64(253402300799), uint32(1), int16(1), uint16(1), []byte(`null`), int32(0), int64(1))
	f.Add("CANCELED", "Completed", []byte("z"), int64(86400), uint32(7), int16(330), uint16(2), []byte(`"s"`), int32(2147483647), int64(9))
	f.Fuzz(func(t *testing.T, status, stage string, idBytes []byte, sec int64, nsec uint32, offset int16, mask uint16, payload []byte, n32 int32, n64 int64) {
		var id uuid.UUID
		copy(id[:], idBytes)
		has := func(bit uint) bool { return mask&(1<<bit) != 0 }
		at := func(k int64) time.Time { return fuzzTime(sec+k*3607, nsec+uint32(k), offset) }
		atPtr := func(bit uint, k int64) *time.Time {
			if !has(bit) {
				return nil
			}
			v := at(k)
			return &v
		}
		str := func(bit uint, s string) *string {
			if !has(bit) {
				return nil
			}
			return &s
		}
		i64 := func(bit uint, v int64) *int64 {
			if !has(bit) {
				return nil
			}
			return &v
		}
		// organization_id stores the global scope as the nil UUID.
		var org *uuid.UUID
		stored := uuid.Nil
		if has(0) {
			o := id
			o[0] ^= 0xff
			stored = o
			if o != uuid.Nil { // the nil UUID is the global scope: no organization
				org = &o
			}
		}
		var pct *float64
		if has(1) {
			p := float64(n64) / 7
			pct = &p
		}
		bs := func(bit uint) []byte {
			if !has(bit) {
				return nil
			}
			return payload
		}
		in := db.JobQueue{
			ID: id, JobType: stage + status, OrganizationID: stored, Payload: bs(2),
			Status: db.JobStatus(status), Priority: n32, RunNumber: n32 ^ 1, Attempt: n32 ^ 2,
			MaxAttempts: n32 ^ 3, TimeoutSeconds: n32 ^ 4, NextRunAt: at(0),
			LeaseExpiresAt: atPtr(3, 1), LastHeartbeatAt: atPtr(4, 2), WorkerID: str(5, status),
			StartedAt: atPtr(6, 3), FinishedAt: atPtr(7, 4), Stage: stage,
			ProgressDone: i64(8, n64), ProgressTotal: i64(9, n64^7), ProgressPct: pct,
			Checkpoint: bs(10), IdempotencyKey: str(11, stage), StatusReason: str(12, "why"),
			LastErrorCode: str(13, "code"), LastErrorMessage: str(14, status+stage),
			CreatedAt: at(5), UpdatedAt: at(6), EnqueueRequest: payload, Output: bs(15),
			ExecutionResourceKey: str(1, stage),
		}
		out, err := rows.Job(in)
		switch {
		case !member(validStatuses, status):
			checkInvalid(t, "job status", codeInvalidStatus, status, err)
			return
		case !member(validStages, stage):
			checkInvalid(t, "job stage", codeInvalidStage, stage, err)
			return
		case err != nil:
			t.Fatalf("valid row (status %q, stage %q) refused: %v", status, stage, err)
		}
		if string(out.Status) != status || string(out.Stage) != stage {
			t.Fatalf("status/stage %q/%q became %q/%q", status, stage, out.Status, out.Stage)
		}
		if out.ID != in.ID || out.JobType != in.JobType || !samePtr(out.OrganizationID, org) ||
			out.Priority != in.Priority || out.RunNumber != in.RunNumber || out.Attempt != in.Attempt ||
			out.MaxAttempts != in.MaxAttempts || out.TimeoutSeconds != in.TimeoutSeconds ||
			!samePtr(out.WorkerID, in.WorkerID) || !samePtr(out.ProgressDone, in.ProgressDone) ||
			!samePtr(out.ProgressTotal, in.ProgressTotal) || !samePtr(out.ProgressPct, in.ProgressPct) ||
			!samePtr(out.IdempotencyKey, in.IdempotencyKey) || !samePtr(out.StatusReason, in.StatusReason) ||
			!samePtr(out.LastErrorCode, in.LastErrorCode) || !samePtr(out.LastErrorMessage, in.LastErrorMessage) ||
			!samePtr(out.ExecutionResourceKey, in.ExecutionResourceKey) {
			t.Fatalf("a copied field changed:\n in  %+v\n out %+v", in, out)
		}
		if out.Scope() != runledger.ScopeOf(org) {
			t.Fatalf("scope %s, want %s", out.Scope(), runledger.ScopeOf(org))
		}
		checkJSON(t, "payload", in.Payload, out.Payload)
		checkJSON(t, "checkpoint", in.Checkpoint, out.Checkpoint)
		checkJSON(t, "output", in.Output, out.Output)
		checkTime(t, "next_run_at", in.NextRunAt, out.NextRunAt)
		checkTime(t, "created_at", in.CreatedAt, out.CreatedAt)
		checkTime(t, "updated_at", in.UpdatedAt, out.UpdatedAt)
		checkTimePtr(t, "lease_expires_at", in.LeaseExpiresAt, out.LeaseExpiresAt)
		checkTimePtr(t, "last_heartbeat_at", in.LastHeartbeatAt, out.LastHeartbeatAt)
		checkTimePtr(t, "started_at", in.StartedAt, out.StartedAt)
		checkTimePtr(t, "finished_at", in.FinishedAt, out.FinishedAt)

		// A slice of rows decodes to the same jobs, or fails on the first
		// bad one.
		bad := in
		bad.Status = db.JobStatus(status + "?")
		if js, err := rows.All([]db.JobQueue{in, in}, rows.Job); err != nil || len(js) != 2 || js[1].ID != out.ID {
			t.Fatalf("All of two valid rows: %v, %v", js, err)
		}
		if js, err := rows.All([]db.JobQueue{in, bad}, rows.Job); js != nil || runledger.CodeOf(err) != codeInvalidStatus {
			t.Fatalf("All with a bad second row: %v, %v", js, err)
		}
	})
}

func FuzzEvent(f *testing.F) {
	f.Add("ENQUEUED", "queued", true, int64(1), []byte("0123456789abcdef"), int64(1700000000), uint32(1), int16(60), uint8(0xff), []byte(`{"job_type":"email"}`))
	f.Add("SUCCEEDED", "", false, int64(-1), []byte{}, int64(0), uint32(0), int16(0), uint8(0), []byte(nil))
	f.Add("CANCELED", "canceled", true, int64(2), []byte("e"), int64(99), uint32(3), int16(-600), uint8(1), []byte(`{}`))
	f.Add("enqueued", "queued", true, int64(3), []byte("f"), int64(5), uint32(4), int16(5), uint8(2), []byte(`1`))
	f.Fuzz(func(t *testing.T, eventType, stage string, hasStage bool, n int64, idBytes []byte, sec int64, nsec uint32, offset int16, mask uint8, payload []byte) {
		var jobID uuid.UUID
		copy(jobID[:], idBytes)
		has := func(bit uint) bool { return mask&(1<<bit) != 0 }
		var st *string
		if hasStage {
			st = &stage
		}
		var attempt *int32
		if has(0) {
			a := int32(n)
			attempt = &a
		}
		var done, total *int64
		if has(1) {
			done = &n
		}
		if has(2) {
			v := n ^ 0x55
			total = &v
		}
		in := db.JobEvent{ID: n, JobID: jobID, RunNumber: int32(n >> 3), Attempt: attempt,
			EventType: db.JobEventType(eventType), Stage: st, ProgressDone: done, ProgressTotal: total,
			Payload: payload, OccurredAt: fuzzTime(sec, nsec, offset)}
		out, err := rows.Event(in)
		switch {
		case !member(validEvents, eventType):
			checkInvalid(t, "event type", codeInvalidEventType, eventType, err)
			return
		case hasStage && !member(validStages, stage):
			checkInvalid(t, "event stage", codeInvalidStage, stage, err)
			return
		case err != nil:
			t.Fatalf("valid event (%q, stage %v) refused: %v", eventType, st, err)
		}
		if string(out.EventType) != eventType {
			t.Fatalf("event type %q became %q", eventType, out.EventType)
		}
		if (out.Stage == nil) != !hasStage || hasStage && string(*out.Stage) != stage {
			t.Fatalf("stage %v became %v", st, out.Stage)
		}
		if out.ID != in.ID || out.JobID != in.JobID || out.RunNumber != in.RunNumber ||
			!samePtr(out.Attempt, in.Attempt) || !samePtr(out.ProgressDone, in.ProgressDone) ||
			!samePtr(out.ProgressTotal, in.ProgressTotal) {
			t.Fatalf("a copied field changed:\n in  %+v\n out %+v", in, out)
		}
		checkJSON(t, "payload", in.Payload, out.Payload)
		checkTime(t, "occurred_at", in.OccurredAt, out.OccurredAt)
	})
}
