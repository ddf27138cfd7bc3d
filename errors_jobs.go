package runledger

// Error codes of package jobs. Like the codes in errors.go they are stable.
// Every request-validation code is category Validation and is returned
// before any database work.
const (
	// A job type that is blank after trimming Unicode white space.
	CodeJobTypeBlank = "job.job_type_blank"
	// A job type (or a job type filter) holding a NUL byte or invalid
	// UTF-8.
	CodeJobTypeInvalid = "job.job_type_invalid"
	// A payload that is not valid JSON, or JSON PostgreSQL's jsonb cannot
	// store (invalid UTF-8, \u0000, an unpaired surrogate escape).
	CodePayloadInvalid = "job.payload_invalid"
	// A max_attempts setting that is not positive.
	CodeMaxAttemptsInvalid = "job.max_attempts_invalid"
	// A timeout_seconds setting that is not positive.
	CodeTimeoutInvalid = "job.timeout_invalid"
	// A run-at time that is the zero time or outside years 1 to 9999.
	CodeRunAtInvalid = "job.run_at_invalid"
	// An idempotency key that is blank, holds a NUL byte or invalid UTF-8,
	// or is over 512 bytes.
	CodeIdempotencyKeyInvalid = "job.idempotency_key_invalid"
	// A worker id that is blank after trimming Unicode white space.
	CodeWorkerIDBlank = "job.worker_id_blank"
	// A worker id holding a NUL byte or invalid UTF-8.
	CodeWorkerIDInvalid = "job.worker_id_invalid"
	// A claim limit outside 1 to 1000.
	CodeClaimLimitInvalid = "job.claim_limit_invalid"
	// A lease duration that is not positive.
	CodeLeaseDurationInvalid = "job.lease_duration_invalid"
	// A completion output that is not valid JSON jsonb can store.
	CodeOutputInvalid = "job.output_invalid"
	// Progress that is negative, or done greater than total.
	CodeProgressInvalid = "job.progress_invalid"
	// A negative retry delay.
	CodeRetryDelayInvalid = "job.retry_delay_invalid"
	// A failure error code or message holding a NUL byte or invalid UTF-8.
	CodeFailureInvalid = "job.failure_invalid"
	// A cancel reason holding a NUL byte or invalid UTF-8.
	CodeCancelReasonInvalid = "job.cancel_reason_invalid"
	// An event read limit outside 1 to 1000.
	CodeEventLimitInvalid = "job.event_limit_invalid"
	// An event type filter that is not a job_event_type value.
	CodeEventFilterInvalid = "job.event_filter_invalid"
	// A list limit outside 1 to 1000.
	CodeListLimitInvalid = "job.list_limit_invalid"
	// A list filter combination no listing serves (an unknown status, a
	// job type without a status, a cursor together with a status).
	CodeListFilterInvalid = "job.list_filter_invalid"
	// A lease recovery limit outside 1 to 1000.
	CodeRecoverLimitInvalid = "job.recover_limit_invalid"
	// A workflow type that is blank or holds a NUL byte or invalid UTF-8.
	CodeWorkflowTypeInvalid = "job.workflow_type_invalid"
	// A workflow step key that is blank or holds a NUL byte or invalid
	// UTF-8.
	CodeWorkflowStepKeyInvalid = "job.workflow_step_key_invalid"
	// A workflow step job with an idempotency key (step jobs are unkeyed).
	CodeWorkflowStepJobKeyed = "job.workflow_step_job_keyed"

	// No definition for the job type (NotFound), from a definition read.
	// Distinct from CodeDefinitionNotFound (Validation), which reports a
	// job row whose type has no definition (the foreign key), and from
	// CodeDefinitionNotFoundOrDisabled, which an enqueue returns.
	CodeDefinitionMissing = "job.definition_missing"
)

// Sentinels for the codes above, for errors.Is. Do not modify them.
var (
	ErrJobTypeBlank = &Error{Code: CodeJobTypeBlank, Category: CategoryValidation,
		Message: "Job type must not be blank."}
	ErrJobTypeInvalid = &Error{Code: CodeJobTypeInvalid, Category: CategoryValidation,
		Message: "Job type must be valid UTF-8 without NUL bytes."}
	ErrPayloadInvalid = &Error{Code: CodePayloadInvalid, Category: CategoryValidation,
		Message: "Job payload must be valid JSON."}
	ErrMaxAttemptsInvalid = &Error{Code: CodeMaxAttemptsInvalid, Category: CategoryValidation,
		Message: "Max attempts must be positive."}
	ErrTimeoutInvalid = &Error{Code: CodeTimeoutInvalid, Category: CategoryValidation,
		Message: "Timeout seconds must be positive."}
	ErrRunAtInvalid = &Error{Code: CodeRunAtInvalid, Category: CategoryValidation,
		Message: "Run-at time is out of range."}
	ErrIdempotencyKeyInvalid = &Error{Code: CodeIdempotencyKeyInvalid, Category: CategoryValidation,
		Message: "Idempotency key must be non-blank UTF-8 without NUL bytes, at most 512 bytes."}
	ErrWorkerIDBlank = &Error{Code: CodeWorkerIDBlank, Category: CategoryValidation,
		Message: "Worker id must not be blank."}
	ErrWorkerIDInvalid = &Error{Code: CodeWorkerIDInvalid, Category: CategoryValidation,
		Message: "Worker id must be valid UTF-8 without NUL bytes."}
	ErrClaimLimitInvalid = &Error{Code: CodeClaimLimitInvalid, Category: CategoryValidation,
		Message: "Claim limit must be between 1 and 1000."}
	ErrLeaseDurationInvalid = &Error{Code: CodeLeaseDurationInvalid, Category: CategoryValidation,
		Message: "Lease duration must be positive."}
	ErrOutputInvalid = &Error{Code: CodeOutputInvalid, Category: CategoryValidation,
		Message: "Job output must be valid JSON."}
	ErrProgressInvalid = &Error{Code: CodeProgressInvalid, Category: CategoryValidation,
		Message: "Progress must be non-negative, with done at most total."}
	ErrRetryDelayInvalid = &Error{Code: CodeRetryDelayInvalid, Category: CategoryValidation,
		Message: "Retry delay must not be negative."}
	ErrFailureInvalid = &Error{Code: CodeFailureInvalid, Category: CategoryValidation,
		Message: "Failure error code and message must be valid UTF-8 without NUL bytes."}
	ErrCancelReasonInvalid = &Error{Code: CodeCancelReasonInvalid, Category: CategoryValidation,
		Message: "Cancel reason must be valid UTF-8 without NUL bytes."}
	ErrEventLimitInvalid = &Error{Code: CodeEventLimitInvalid, Category: CategoryValidation,
		Message: "Event limit must be between 1 and 1000."}
	ErrEventFilterInvalid = &Error{Code: CodeEventFilterInvalid, Category: CategoryValidation,
		Message: "Event type is not valid."}
	ErrListLimitInvalid = &Error{Code: CodeListLimitInvalid, Category: CategoryValidation,
		Message: "List limit must be between 1 and 1000."}
	ErrListFilterInvalid = &Error{Code: CodeListFilterInvalid, Category: CategoryValidation,
		Message: "Job list filter is not supported."}
	ErrRecoverLimitInvalid = &Error{Code: CodeRecoverLimitInvalid, Category: CategoryValidation,
		Message: "Lease recovery limit must be between 1 and 1000."}
	ErrWorkflowTypeInvalid = &Error{Code: CodeWorkflowTypeInvalid, Category: CategoryValidation,
		Message: "Workflow type must be non-blank UTF-8 without NUL bytes."}
	ErrWorkflowStepKeyInvalid = &Error{Code: CodeWorkflowStepKeyInvalid, Category: CategoryValidation,
		Message: "Workflow step key must be non-blank UTF-8 without NUL bytes."}
	ErrWorkflowStepJobKeyed = &Error{Code: CodeWorkflowStepJobKeyed, Category: CategoryValidation,
		Message: "Workflow step jobs cannot have an idempotency key."}
	ErrDefinitionMissing = &Error{Code: CodeDefinitionMissing, Category: CategoryNotFound,
		Message: "Job definition not found."}
)
