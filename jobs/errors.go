package jobs

import (
	"github.com/runledger-go/runledger/internal/errs"
)

// The request-validation errors of this package, all category Validation
// and returned before any database work. Their codes are stable; match one
// with errors.Is(err, runledger.Code("job.payload_invalid")).
var (
	errPayloadTooLarge = errs.Validation("job.payload_too_large",
		"Job payload is too large.")
	errPayloadInvalid = errs.Validation("job.payload_invalid",
		"Job payload must be valid JSON.")
	errMaxAttemptsInvalid = errs.Validation("job.max_attempts_invalid",
		"Max attempts must be positive.")
	errTimeoutInvalid = errs.Validation("job.timeout_invalid",
		"Timeout seconds must be positive.")
	errRunAtInvalid = errs.Validation("job.run_at_invalid",
		"Run-at time is out of range.")
	errIdempotencyKeyInvalid = errs.Validation("job.idempotency_key_invalid",
		"Idempotency key must be non-blank UTF-8 without NUL bytes, at most 512 bytes.")
	errResourceKeyInvalid = errs.Validation("job.invalid_execution_resource_key",
		"Execution resource key must be non-blank and at most 512 bytes.")
	errCancelReasonInvalid = errs.Validation("job.cancel_reason_invalid",
		"Cancel reason must be valid UTF-8 without NUL bytes.")
	errWorkflowTypeInvalid = errs.Validation("job.workflow_type_invalid",
		"Workflow type must be non-blank UTF-8 without NUL bytes.")
	errWorkflowStepKeyInvalid = errs.Validation("job.workflow_step_key_invalid",
		"Workflow step key must be non-blank UTF-8 without NUL bytes.")
	errWorkflowStepJobKeyed = errs.Validation("job.workflow_step_job_keyed",
		"Workflow step jobs cannot have an idempotency key.")
)
