package jobs_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// deadPool returns a closed pool configured for an address where nothing
// listens: any operation that reached for the database would fail with a
// connection error, so a validation error from it proves no round trip.
func deadPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	return pool
}

func TestValidationFailsBeforeAnyDatabaseWork(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := deadPool(t)
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
	okClaim := jobs.ClaimRequest{WorkerID: "w", Limit: 1, Lease: time.Second}
	claimWith := func(f func(*jobs.ClaimRequest)) func() error {
		r := okClaim
		f(&r)
		return func() error {
			_, err := jobs.Claim(ctx, pool, r)
			if _, errTx := jobs.ClaimTx(ctx, nil, r); runledger.CodeOf(errTx) != runledger.CodeOf(err) {
				t.Errorf("ClaimTx code %q, Claim code %q", runledger.CodeOf(errTx), runledger.CodeOf(err))
			}
			return err
		}
	}
	okComplete := jobs.CompleteRequest{JobID: uuid.New(), RunNumber: 1, Attempt: 1, WorkerID: "w"}
	completeWith := func(f func(*jobs.CompleteRequest)) func() error {
		r := okComplete
		f(&r)
		return func() error {
			_, err := jobs.Complete(ctx, pool, r)
			if _, errTx := jobs.CompleteTx(ctx, nil, r); runledger.CodeOf(errTx) != runledger.CodeOf(err) {
				t.Errorf("CompleteTx code %q, Complete code %q", runledger.CodeOf(errTx), runledger.CodeOf(err))
			}
			return err
		}
	}
	okFail := jobs.FailRequest{JobID: uuid.New(), RunNumber: 1, Attempt: 1, WorkerID: "w"}
	failWith := func(f func(*jobs.FailRequest)) func() error {
		r := okFail
		f(&r)
		return func() error {
			_, err := jobs.Fail(ctx, pool, r)
			if _, errTx := jobs.FailTx(ctx, nil, r); runledger.CodeOf(errTx) != runledger.CodeOf(err) {
				t.Errorf("FailTx code %q, Fail code %q", runledger.CodeOf(errTx), runledger.CodeOf(err))
			}
			return err
		}
	}
	tooLongKey := strings.Repeat("k", jobs.MaxIdempotencyKeyBytes+1)

	cases := []struct {
		name string
		call func() error
		want *runledger.Error
	}{
		{"definition type blank", func() error {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: " \t\u00a0"})
			return err
		}, runledger.ErrJobTypeBlank},
		{"definition type NUL", func() error {
			_, err := jobs.UpsertDefinitionTx(ctx, nil, jobs.DefinitionInput{JobType: "a\x00b"})
			return err
		}, runledger.ErrJobTypeInvalid},
		{"definition max attempts", func() error {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "x", MaxAttempts: testdb.Ptr[int32](0)})
			return err
		}, runledger.ErrMaxAttemptsInvalid},
		{"definition timeout", func() error {
			_, err := jobs.UpsertDefinition(ctx, pool, jobs.DefinitionInput{JobType: "x", TimeoutSeconds: testdb.Ptr[int32](-1)})
			return err
		}, runledger.ErrTimeoutInvalid},
		{"get definition blank", func() error { _, err := jobs.GetDefinition(ctx, pool, ""); return err }, runledger.ErrJobTypeBlank},

		{"enqueue type blank", enq(with(func(r *jobs.EnqueueRequest) { r.JobType = "  " })), runledger.ErrJobTypeBlank},
		{"enqueue type invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.JobType = "\xff" })), runledger.ErrJobTypeInvalid},
		{"payload not JSON", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{"a":`) })), runledger.ErrPayloadInvalid},
		{"payload empty", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage{} })), runledger.ErrPayloadInvalid},
		{"payload two values", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{} {}`) })), runledger.ErrPayloadInvalid},
		{"payload invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage("\"\xff\"") })), runledger.ErrPayloadInvalid},
		{"payload NUL escape", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{"a":"x\u0000"}`) })), runledger.ErrPayloadInvalid},
		{"payload NUL escape in key", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`{"\u0000":1}`) })), runledger.ErrPayloadInvalid},
		{"payload lone high surrogate", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`"\ud83d"`) })), runledger.ErrPayloadInvalid},
		{"payload high surrogate then text", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`"\ud83dx"`) })), runledger.ErrPayloadInvalid},
		{"payload lone low surrogate", enq(with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`"\ude00"`) })), runledger.ErrPayloadInvalid},
		{"max attempts zero", enq(with(func(r *jobs.EnqueueRequest) { r.MaxAttempts = testdb.Ptr[int32](0) })), runledger.ErrMaxAttemptsInvalid},
		{"timeout zero", enq(with(func(r *jobs.EnqueueRequest) { r.TimeoutSeconds = testdb.Ptr[int32](0) })), runledger.ErrTimeoutInvalid},
		{"run at zero", enq(with(func(r *jobs.EnqueueRequest) { r.RunAt = &time.Time{} })), runledger.ErrRunAtInvalid},
		{"run at year 10000", enq(with(func(r *jobs.EnqueueRequest) { r.RunAt = testdb.Ptr(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)) })), runledger.ErrRunAtInvalid},
		{"idempotency key blank", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = " \u3000 " })), runledger.ErrIdempotencyKeyInvalid},
		{"idempotency key NUL", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = "a\x00" })), runledger.ErrIdempotencyKeyInvalid},
		{"idempotency key invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = "a\xc3" })), runledger.ErrIdempotencyKeyInvalid},
		{"idempotency key too long", enq(with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = tooLongKey })), runledger.ErrIdempotencyKeyInvalid},
		{"resource key blank", enq(with(func(r *jobs.EnqueueRequest) { r.ExecutionResourceKey = "\u2028" })), invalidResourceKey},
		{"resource key too long", enq(with(func(r *jobs.EnqueueRequest) { r.ExecutionResourceKey = tooLongKey })), invalidResourceKey},
		{"resource key invalid UTF-8", enq(with(func(r *jobs.EnqueueRequest) { r.ExecutionResourceKey = "k\xff" })), invalidResourceKey},

		{"claim worker blank", claimWith(func(r *jobs.ClaimRequest) { r.WorkerID = " " }), runledger.ErrWorkerIDBlank},
		{"claim worker NUL", claimWith(func(r *jobs.ClaimRequest) { r.WorkerID = "w\x00" }), runledger.ErrWorkerIDInvalid},
		{"claim type blank", claimWith(func(r *jobs.ClaimRequest) { r.JobTypes = []string{"email", ""} }), runledger.ErrJobTypeBlank},
		{"claim limit zero", claimWith(func(r *jobs.ClaimRequest) { r.Limit = 0 }), runledger.ErrClaimLimitInvalid},
		{"claim limit too big", claimWith(func(r *jobs.ClaimRequest) { r.Limit = jobs.MaxLimit + 1 }), runledger.ErrClaimLimitInvalid},
		{"claim lease zero", claimWith(func(r *jobs.ClaimRequest) { r.Lease = 0 }), runledger.ErrLeaseDurationInvalid},
		{"claim lease negative", claimWith(func(r *jobs.ClaimRequest) { r.Lease = -time.Second }), runledger.ErrLeaseDurationInvalid},

		{"complete worker blank", completeWith(func(r *jobs.CompleteRequest) { r.WorkerID = "" }), runledger.ErrWorkerIDBlank},
		{"complete output", completeWith(func(r *jobs.CompleteRequest) { r.Output = json.RawMessage(`nope`) }), runledger.ErrOutputInvalid},
		{"complete progress negative", completeWith(func(r *jobs.CompleteRequest) { r.ProgressDone = testdb.Ptr[int64](-1) }), runledger.ErrProgressInvalid},
		{"complete progress over total", completeWith(func(r *jobs.CompleteRequest) {
			r.ProgressDone, r.ProgressTotal = testdb.Ptr[int64](5), testdb.Ptr[int64](4)
		}), runledger.ErrProgressInvalid},

		{"fail worker blank", failWith(func(r *jobs.FailRequest) { r.WorkerID = "\n" }), runledger.ErrWorkerIDBlank},
		{"fail error code NUL", failWith(func(r *jobs.FailRequest) { r.ErrorCode = "\x00" }), runledger.ErrFailureInvalid},
		{"fail message invalid UTF-8", failWith(func(r *jobs.FailRequest) { r.ErrorMessage = "\xfe" }), runledger.ErrFailureInvalid},
		{"fail retry delay negative", failWith(func(r *jobs.FailRequest) { r.RetryDelay = testdb.Ptr(-time.Millisecond) }), runledger.ErrRetryDelayInvalid},

		{"cancel reason NUL", func() error {
			_, err := jobs.Cancel(ctx, pool, jobs.CancelRequest{JobID: uuid.New(), Reason: "\x00"})
			return err
		}, runledger.ErrCancelReasonInvalid},
		{"cancel tx reason invalid", func() error {
			_, err := jobs.CancelTx(ctx, nil, jobs.CancelRequest{JobID: uuid.New(), Reason: "\xff"})
			return err
		}, runledger.ErrCancelReasonInvalid},

		{"recover limit zero", func() error { _, err := jobs.RecoverExpiredLeases(ctx, pool, 0); return err }, runledger.ErrRecoverLimitInvalid},
		{"recover tx limit too big", func() error { _, err := jobs.RecoverExpiredLeasesTx(ctx, nil, 1001); return err }, runledger.ErrRecoverLimitInvalid},

		{"newest events limit", func() error {
			_, err := jobs.NewestEvents(ctx, pool, runledger.Global(), uuid.New(), 0)
			return err
		}, runledger.ErrEventLimitInvalid},
		{"recent events limit", func() error {
			_, err := jobs.RecentEventsByType(ctx, pool, runledger.JobEventLeased, time.Now(), 1001)
			return err
		}, runledger.ErrEventLimitInvalid},
		{"recent events type", func() error {
			_, err := jobs.RecentEventsByType(ctx, pool, "leased", time.Now(), 10)
			return err
		}, runledger.ErrEventFilterInvalid},

		{"list limit", func() error { _, err := jobs.List(ctx, pool, jobs.ListRequest{Limit: 0}); return err }, runledger.ErrListLimitInvalid},
		{"list status unknown", func() error {
			_, err := jobs.List(ctx, pool, jobs.ListRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatus("DONE"))})
			return err
		}, runledger.ErrListFilterInvalid},
		{"list status with cursor", func() error {
			_, err := jobs.List(ctx, pool, jobs.ListRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatusPending), Before: &jobs.Cursor{}})
			return err
		}, runledger.ErrListFilterInvalid},
		{"list all limit", func() error { _, err := jobs.ListAll(ctx, pool, jobs.ListAllRequest{Limit: 1001}); return err }, runledger.ErrListLimitInvalid},
		{"list all type without status", func() error {
			_, err := jobs.ListAll(ctx, pool, jobs.ListAllRequest{Limit: 1, JobType: "email"})
			return err
		}, runledger.ErrListFilterInvalid},
		{"list all status without type", func() error {
			_, err := jobs.ListAll(ctx, pool, jobs.ListAllRequest{Limit: 1, Status: testdb.Ptr(runledger.JobStatusPending)})
			return err
		}, runledger.ErrListFilterInvalid},

		{"workflow type blank", func() error {
			_, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{WorkflowType: " ", StepKey: "s", Job: ok})
			return err
		}, runledger.ErrWorkflowTypeInvalid},
		{"workflow step key NUL", func() error {
			_, err := jobs.EnqueueWorkflowStepTx(ctx, nil, jobs.WorkflowStepRequest{WorkflowType: "w", StepKey: "\x00", Job: ok})
			return err
		}, runledger.ErrWorkflowStepKeyInvalid},
		{"workflow step job keyed", func() error {
			_, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{WorkflowType: "w", StepKey: "s",
				Job: with(func(r *jobs.EnqueueRequest) { r.IdempotencyKey = "k" })})
			return err
		}, runledger.ErrWorkflowStepJobKeyed},
		{"workflow step job invalid", func() error {
			_, err := jobs.EnqueueWorkflowStep(ctx, pool, jobs.WorkflowStepRequest{WorkflowType: "w", StepKey: "s",
				Job: with(func(r *jobs.EnqueueRequest) { r.Payload = json.RawMessage(`x`) })})
			return err
		}, runledger.ErrPayloadInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			wantCode(t, err, c.want)
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

var invalidResourceKey = &runledger.Error{Code: runledger.CodeInvalidExecutionResourceKey, Category: runledger.CategoryValidation}

func TestValidationAcceptsBoundaryValues(t *testing.T) {
	t.Parallel()
	key512 := strings.Repeat("é", jobs.MaxIdempotencyKeyBytes/2)
	reqs := []jobs.EnqueueRequest{
		{JobType: "email", IdempotencyKey: key512, ExecutionResourceKey: key512},
		{JobType: "email", Payload: json.RawMessage(` {"a":"\ud83d\ude00","b":"\\u0000"} `)},
		{JobType: "email", Payload: json.RawMessage(`0`), MaxAttempts: testdb.Ptr[int32](1), TimeoutSeconds: testdb.Ptr[int32](1), Priority: testdb.Ptr[int32](-1 << 31)},
		{JobType: "email", RunAt: testdb.Ptr(time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC))},
	}
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if err := (jobs.ClaimRequest{WorkerID: "w", Limit: jobs.MaxLimit, Lease: time.Microsecond}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (jobs.FailRequest{WorkerID: "w", RetryDelay: testdb.Ptr(time.Duration(0))}).Validate(); err != nil {
		t.Error(err)
	}
}
