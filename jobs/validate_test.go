package jobs_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
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
	okClaim := lease.ClaimRequest{WorkerID: "w", Limit: 1, Lease: time.Second}
	claimWith := func(f func(*lease.ClaimRequest)) func() error {
		r := okClaim
		f(&r)
		return func() error {
			_, err := lease.Claim(ctx, pool, r)
			if _, errTx := lease.ClaimTx(ctx, nil, r); runledger.CodeOf(errTx) != runledger.CodeOf(err) {
				t.Errorf("ClaimTx code %q, Claim code %q", runledger.CodeOf(errTx), runledger.CodeOf(err))
			}
			return err
		}
	}
	okComplete := lease.CompleteRequest{JobID: uuid.New(), RunNumber: 1, Attempt: 1, WorkerID: "w"}
	completeWith := func(f func(*lease.CompleteRequest)) func() error {
		r := okComplete
		f(&r)
		return func() error {
			_, err := lease.Complete(ctx, pool, r)
			if _, errTx := lease.CompleteTx(ctx, nil, r); runledger.CodeOf(errTx) != runledger.CodeOf(err) {
				t.Errorf("CompleteTx code %q, Complete code %q", runledger.CodeOf(errTx), runledger.CodeOf(err))
			}
			return err
		}
	}
	okFail := lease.FailRequest{JobID: uuid.New(), RunNumber: 1, Attempt: 1, WorkerID: "w"}
	failWith := func(f func(*lease.FailRequest)) func() error {
		r := okFail
		f(&r)
		return func() error {
			_, err := lease.Fail(ctx, pool, r)
			if _, errTx := lease.FailTx(ctx, nil, r); runledger.CodeOf(errTx) != runledger.CodeOf(err) {
				t.Errorf("FailTx code %q, Fail code %q", runledger.CodeOf(errTx), runledger.CodeOf(err))
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

		{"claim worker blank", claimWith(func(r *lease.ClaimRequest) { r.WorkerID = " " }), "job.worker_id_blank"},
		{"claim worker NUL", claimWith(func(r *lease.ClaimRequest) { r.WorkerID = "w\x00" }), "job.worker_id_invalid"},
		{"claim type blank", claimWith(func(r *lease.ClaimRequest) { r.JobTypes = []string{"email", ""} }), "job.job_type_blank"},
		{"claim limit zero", claimWith(func(r *lease.ClaimRequest) { r.Limit = 0 }), "job.claim_limit_invalid"},
		{"claim limit too big", claimWith(func(r *lease.ClaimRequest) { r.Limit = runledger.MaxLimit + 1 }), "job.claim_limit_invalid"},
		{"claim lease zero", claimWith(func(r *lease.ClaimRequest) { r.Lease = 0 }), "job.lease_duration_invalid"},
		{"claim lease negative", claimWith(func(r *lease.ClaimRequest) { r.Lease = -time.Second }), "job.lease_duration_invalid"},

		{"complete worker blank", completeWith(func(r *lease.CompleteRequest) { r.WorkerID = "" }), "job.worker_id_blank"},
		{"complete output", completeWith(func(r *lease.CompleteRequest) { r.Output = json.RawMessage(`nope`) }), "job.output_invalid"},
		{"complete progress negative", completeWith(func(r *lease.CompleteRequest) { r.ProgressDone = testdb.Ptr[int64](-1) }), "job.progress_invalid"},
		{"complete progress over total", completeWith(func(r *lease.CompleteRequest) {
			r.ProgressDone, r.ProgressTotal = testdb.Ptr[int64](5), testdb.Ptr[int64](4)
		}), "job.progress_invalid"},

		{"fail worker blank", failWith(func(r *lease.FailRequest) { r.WorkerID = "\n" }), "job.worker_id_blank"},
		{"fail error code NUL", failWith(func(r *lease.FailRequest) { r.ErrorCode = "\x00" }), "job.failure_invalid"},
		{"fail message invalid UTF-8", failWith(func(r *lease.FailRequest) { r.ErrorMessage = "\xfe" }), "job.failure_invalid"},
		{"fail retry delay negative", failWith(func(r *lease.FailRequest) { r.RetryDelay = testdb.Ptr(-time.Millisecond) }), "job.retry_delay_invalid"},

		{"cancel reason NUL", func() error {
			_, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: uuid.New(), Reason: "\x00"})
			return err
		}, "job.cancel_reason_invalid"},
		{"cancel tx reason invalid", func() error {
			_, err := jobs.CancelTx(ctx, nil, jobs.CancelRequest{JobID: uuid.New(), Reason: "\xff"})
			return err
		}, "job.cancel_reason_invalid"},

		{"recover limit zero", func() error { _, err := lease.RecoverExpiredLeases(ctx, pool, 0); return err }, "job.recover_limit_invalid"},
		{"recover tx limit too big", func() error { _, err := lease.RecoverExpiredLeasesTx(ctx, nil, 1001); return err }, "job.recover_limit_invalid"},

		{"newest events limit", func() error {
			_, err := inspect.NewestEvents(ctx, pool, runledger.Global(), uuid.New(), 0)
			return err
		}, "job.event_limit_invalid"},
		{"recent events limit", func() error {
			_, err := inspect.RecentEventsByType(ctx, pool, runledger.JobEventLeased, time.Now(), 1001)
			return err
		}, "job.event_limit_invalid"},
		{"recent events type", func() error {
			_, err := inspect.RecentEventsByType(ctx, pool, "leased", time.Now(), 10)
			return err
		}, "job.event_filter_invalid"},

		{"list limit", func() error { _, err := inspect.List(ctx, pool, inspect.ListRequest{Limit: 0}); return err }, "job.list_limit_invalid"},
		{"list status unknown", func() error {
			_, err := inspect.List(ctx, pool, inspect.ListRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatus("DONE"))})
			return err
		}, "job.list_filter_invalid"},
		{"list status with cursor", func() error {
			_, err := inspect.List(ctx, pool, inspect.ListRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatusPending), Before: &inspect.Cursor{}})
			return err
		}, "job.list_filter_invalid"},
		{"list all limit", func() error { _, err := inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 1001}); return err }, "job.list_limit_invalid"},
		{"list all type without status", func() error {
			_, err := inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 1, JobType: "email"})
			return err
		}, "job.list_filter_invalid"},
		{"list all status without type", func() error {
			_, err := inspect.ListAll(ctx, pool, inspect.ListAllRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatusPending)})
			return err
		}, "job.list_filter_invalid"},

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
		{"claim type filter too long", claimWith(func(r *lease.ClaimRequest) { r.JobTypes = []string{strings.Repeat("é", 128)} }), "job.job_type_too_long"},
		{"payload over the default limit", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = jsonString(runledger.DefaultMaxJSONBytes + 1) })), "job.payload_too_large"},
		{"payload over its own limit", enq(with(func(r *jobs.EnqueueRequest) { r.Payload, r.MaxPayloadBytes = jsonString(11), 10 })), "job.payload_too_large"},
		{"payload too large wins over invalid", enq(with(func(r *jobs.EnqueueRequest) { r.Payload, r.MaxPayloadBytes = json.RawMessage(`{"a":`), 4 })), "job.payload_too_large"},
		{"complete output over the default limit", completeWith(func(r *lease.CompleteRequest) { r.Output = jsonString(runledger.DefaultMaxJSONBytes + 1) }), "job.output_too_large"},
		{"complete output over its own limit", completeWith(func(r *lease.CompleteRequest) { r.Output, r.MaxOutputBytes = jsonString(3), 2 }), "job.output_too_large"},
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
		jobs.EnqueueRequest{JobType: "email", Payload: jsonString(runledger.DefaultMaxJSONBytes)},
		jobs.EnqueueRequest{JobType: "email", Payload: jsonString(runledger.DefaultMaxJSONBytes + 1), MaxPayloadBytes: 2 * runledger.DefaultMaxJSONBytes},
		jobs.EnqueueRequest{JobType: "email", Payload: jsonString(10), MaxPayloadBytes: 10},
	)
	for _, out := range []lease.CompleteRequest{
		{WorkerID: "w", Output: jsonString(runledger.DefaultMaxJSONBytes)},
		{WorkerID: "w", Output: jsonString(5), MaxOutputBytes: 5},
	} {
		if err := out.Validate(); err != nil {
			t.Errorf("output of %d bytes: %v", len(out.Output), err)
		}
	}
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if err := (lease.ClaimRequest{WorkerID: "w", Limit: runledger.MaxLimit, Lease: time.Microsecond}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (lease.FailRequest{WorkerID: "w", RetryDelay: testdb.Ptr(time.Duration(0))}).Validate(); err != nil {
		t.Error(err)
	}
}

// jsonString returns a JSON string value exactly n bytes long (n >= 2).
func jsonString(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
}
