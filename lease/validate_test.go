package lease_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/lease"
)

func TestValidationFailsBeforeAnyDatabaseWork(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.ClosedPool(t)
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
	cases := []struct {
		name string
		call func() error
		want runledger.Code
	}{
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
		{"recover limit zero", func() error { _, err := lease.RecoverExpiredLeases(ctx, pool, 0); return err }, "job.recover_limit_invalid"},
		{"recover tx limit too big", func() error { _, err := lease.RecoverExpiredLeasesTx(ctx, nil, 1001); return err }, "job.recover_limit_invalid"},
		{"claim type filter too long", claimWith(func(r *lease.ClaimRequest) { r.JobTypes = []string{strings.Repeat("é", 128)} }), "job.job_type_too_long"},
		{"complete output over the default limit", completeWith(func(r *lease.CompleteRequest) { r.Output = testdb.JSONString(runledger.DefaultMaxJSONBytes + 1) }), "job.output_too_large"},
		{"complete output over its own limit", completeWith(func(r *lease.CompleteRequest) { r.Output, r.MaxOutputBytes = testdb.JSONString(3), 2 }), "job.output_too_large"},
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
	_, err := lease.Claim(ctx, pool, okClaim)
	if err == nil || runledger.CategoryOf(err) == runledger.CategoryValidation {
		t.Fatalf("valid claim on the dead pool = %v, want a database failure", err)
	}
}

func TestValidationAcceptsBoundaryValues(t *testing.T) {
	t.Parallel()
	for _, out := range []lease.CompleteRequest{
		{WorkerID: "w", Output: testdb.JSONString(runledger.DefaultMaxJSONBytes)},
		{WorkerID: "w", Output: testdb.JSONString(5), MaxOutputBytes: 5},
	} {
		if err := out.Validate(); err != nil {
			t.Errorf("output of %d bytes: %v", len(out.Output), err)
		}
	}
	if err := (lease.ClaimRequest{WorkerID: "w", Limit: runledger.MaxLimit, Lease: time.Microsecond}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (lease.FailRequest{WorkerID: "w", RetryDelay: testdb.Ptr(time.Duration(0))}).Validate(); err != nil {
		t.Error(err)
	}
}
