package lease

import (
	"github.com/runledger-go/runledger/internal/errs"
)

// The request-validation errors of this package, all category Validation
// and returned before any database work. Their codes are stable; match one
// with errors.Is(err, runledger.Code("job.claim_limit_invalid")).
var (
	errWorkerIDBlank = errs.Validation("job.worker_id_blank",
		"Worker id must not be blank.")
	errWorkerIDInvalid = errs.Validation("job.worker_id_invalid",
		"Worker id must be valid UTF-8 without NUL bytes.")
	errClaimLimitInvalid = errs.Validation("job.claim_limit_invalid",
		"Claim limit must be between 1 and 1000.")
	errLeaseDurationInvalid = errs.Validation("job.lease_duration_invalid",
		"Lease duration is out of range (1µs to 24h).")
	errOutputTooLarge = errs.Validation("job.output_too_large",
		"Job output is too large.")
	errOutputInvalid = errs.Validation("job.output_invalid",
		"Job output must be valid JSON.")
	errProgressInvalid = errs.Validation("job.progress_invalid",
		"Progress must be non-negative, with done at most total.")
	errRetryDelayInvalid = errs.Validation("job.retry_delay_invalid",
		"Retry delay must not be negative.")
	errFailureInvalid = errs.Validation("job.failure_invalid",
		"Failure error code and message must be valid UTF-8 without NUL bytes.")
	errRecoverLimitInvalid = errs.Validation("job.recover_limit_invalid",
		"Lease recovery limit must be between 1 and 1000.")
)
