package jobs_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

func TestValidationFailsBeforeAnyDatabaseWork(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.ClosedPool(t)
	ok := jobs.EnqueueRequest{JobType: "email"}
	with := func(f func(*jobs.EnqueueRequest)) jobs.EnqueueRequest { r := ok; f(&r); return r }
	enq := func(r jobs.EnqueueRequest) func() error {
		return func() error {
			_, err := jobs.Enqueue(ctx, pool, r)
			if _, errTx := jobs.EnqueueTx(ctx, nil, r); runledger.CodeOf(errTx) != runledger.CodeOf(err) {
				t.Errorf("EnqueueTx code %q, Enqueue code %q", runledger.CodeOf(errTx), runledger.CodeOf(err))
			}
			return err
		}
	}
	tooLongKey := strings.Repeat("k", runledger.MaxKeyBytes+1)

	cases := []struct {
		name string
		call func() error
		want runledger.Code
	}{
		{"definition type blank", func() error {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: " \t\u00a0"})
			return err
		}, "job.job_type_blank"},
		{"definition type NUL", func() error {
			_, err := jobs.UpsertDefinitionTx(ctx, nil, jobs.DefinitionInput{JobType: "a\x00b"})
			return err
		}, "job.job_type_invalid"},
		{"definition max attempts", func() error {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "x", MaxAttempts: testdb.Ptr[int32](0)})
			return err
		}, "job.max_attempts_invalid"},
		{"definition timeout", func() error {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "x", TimeoutSeconds: testdb.Ptr[int32](-1)})
			return err
		}, "job.timeout_invalid"},
		{"get definition blank", func() error { _, err := jobs.GetDefinition(ctx, pool, ""); return err }, "job.job_type_blank"},
		{"enqueue type blank", enq(with(func(r *jobs.EnqueueRequest) { r.JobType = "  " })), "job.job_type_blank"},
		{"enqueue type invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.JobType = "\xff" })), "job.job_type_invalid"},
		{"payload not JSON", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{"a":`) })), "job.payload_invalid"},
		{"payload empty", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage{} })), "job.payload_invalid"},
		{"payload two values", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{} {}`) })), "job.payload_invalid"},
		{"payload invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage("\"\xff\"") })), "job.payload_invalid"},
		{"payload NUL escape", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{"a":"x\u0000"}`) })), "job.payload_invalid"},
		{"payload NUL escape in key", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{"\u0000":1}`) })), "job.payload_invalid"},
		{"payload lone high surrogate", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`"\ud83d"`) })), "job.payload_invalid"},
		{"payload high surrogate then text", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`"\ud83dx"`) })), "job.payload_invalid"},
		{"payload lone low surrogate", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`"\ude00"`) })), "job.payload_invalid"},
		{"max attempts zero", enq(with(func(r *jobs.EnqueueRequest) { r.MaxAttempts = testdb.Ptr[int32](0) })), "job.max_attempts_invalid"},
		{"timeout zero", enq(with(func(r *jobs.EnqueueRequest) { r.TimeoutSeconds = testdb.Ptr[int32](0) })), "job.timeout_invalid"},
		{"run at zero", enq(with(func(r *jobs.EnqueueRequest) { r.RunAt = &time.Time{} })), "job.run_at_invalid"},
		{"run at year 10000", enq(with(func(r *jobs.EnqueueRequest) { r.RunAt = testdb.Ptr(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)) })), "job.run_at_invalid"},
		{"idempotency key blank", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = " \u3000 " })), "job.idempotency_key_invalid"},
		{"idempotency key NUL", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = "a\x00" })), "job.idempotency_key_invalid"},
		{"idempotency key invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = "a\xc3" })), "job.idempotency_key_invalid"},
		{"idempotency key too long", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = tooLongKey })), "job.idempotency_key_invalid"},
		{"resource key blank", enq(with(func(r *jobs.EnqueueRequest) { r.ExecutionResourceKey = "\u2028" })), invalidResourceKey},
		{"resource key too long", enq(with(func(r *jobs.EnqueueRequest) { r.ExecutionResourceKey = tooLongKey })), invalidResourceKey},
		{"resource key invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.ExecutionResourceKey = "k\xff" })), invalidResourceKey},
		{"cancel reason NUL", func() error {
			_, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: uuid.New(), Reason: "\x00"})
			return err
		}, "job.cancel_reason_invalid"},
		{"cancel tx reason invalid", func() error {
			_, err := jobs.CancelTx(ctx, nil, jobs.CancelRequest{JobID: uuid.New(), Reason: "\xff"})
			return err
		}, "job.cancel_reason_invalid"},
		{"workflow type blank", func() error {
			_, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{WorkflowType: " ", StepKey: "s", Job: ok})
			return err
		}, "job.workflow_type_invalid"},
		{"workflow step key NUL", func() error {
			_, err := jobs.EnqueueWorkflowStepTx(ctx, nil, jobs.WorkflowStepRequest{WorkflowType: "w", StepKey: "\x00", Job: ok})
			return err
		}, "job.workflow_step_key_invalid"},
		{"workflow step job keyed", func() error {
			_, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{WorkflowType: "w", StepKey: "s",
				Job: with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = "k" })})
			return err
		}, "job.workflow_step_job_keyed"},
		{"workflow step job invalid", func() error {
			_, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{WorkflowType: "w", StepKey: "s",
				Job: with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`x`) })})
			return err
		}, "job.payload_invalid"},
		{"definition type too long", func() error {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: strings.Repeat("t", runledger.MaxJobTypeBytes+1)})
			return err
		}, "job.job_type_too_long"},
		{"enqueue type 9000 bytes", enq(with(func(r *jobs.EnqueueRequest) { r.JobType = strings.Repeat("t", 9000) })), "job.job_type_too_long"},
		{"payload over the default limit", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = testdb.JSONString(runledger.DefaultMaxJSONBytes + 1) })), "job.payload_too_large"},
		{"payload over its own limit", enq(with(func(r *jobs.EnqueueRequest) { r.Payload, r.MaxPayloadBytes = testdb.JSONString(11), 10 })), "job.payload_too_large"},
		{"payload too large wins over invalid", enq(with(func(r *jobs.EnqueueRequest) { r.Payload, r.MaxPayloadBytes = json.RawMessage(`{"a":`), 4 })), "job.payload_too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			testdb.WantCode(t, err, c.want)
			if runledger.CategoryOf(err) != runledger.CategoryValidation {
				t.Fatalf("category = %s, want validation", runledger.CategoryOf(err))
			}
		})
	}

	// The pool really cannot reach a database: a valid request fails
	// otherwise than by validation.
	_, err := jobs.Enqueue(ctx, pool, ok)
	if err == nil || runledger.CategoryOf(err) == runledger.CategoryValidation {
		t.Fatalf("valid enqueue on the dead pool = %v, want a database failure", err)
	}
}

const invalidResourceKey runledger.Code = "job.invalid_execution_resource_key"

func TestValidationAcceptsBoundaryValues(t *testing.T) {
	t.Parallel()
	key512 := strings.Repeat("é", runledger.MaxKeyBytes/2)
	reqs := []jobs.EnqueueRequest{
		{JobType: "email", IdempotencyKey: key512, ExecutionResourceKey: key512},
		{JobType: "email", Payload: json.RawMessage(` {"a":"\ud83d\ude00","b":"\\u0000"} `)},
		{JobType: "email", Payload: json.RawMessage(`0`), MaxAttempts: testdb.Ptr[int32](1), TimeoutSeconds: testdb.Ptr[int32](1), Priority: testdb.Ptr[int32](-1 << 31)},
		{JobType: "email", RunAt: testdb.Ptr(time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC))},
	}
	reqs = append(reqs,
		jobs.EnqueueRequest{JobType: strings.Repeat("é", runledger.MaxJobTypeBytes/2) + "e"},
		jobs.EnqueueRequest{JobType: "email", Payload: testdb.JSONString(runledger.DefaultMaxJSONBytes)},
		jobs.EnqueueRequest{JobType: "email", Payload: testdb.JSONString(runledger.DefaultMaxJSONBytes + 1), MaxPayloadBytes: 2 * runledger.DefaultMaxJSONBytes},
		jobs.EnqueueRequest{JobType: "email", Payload: testdb.JSONString(10), MaxPayloadBytes: 10},
	)
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
}
