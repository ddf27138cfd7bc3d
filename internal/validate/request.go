package validate

import (
	"strings"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// Invalid returns an error of kind whose client message says what was
// refused and why, with the limit that was broken and the value given
// (the detail, which holds only the caller's own input): "Lease duration
// is out of range (1µs to 24h): lease must be between 1µs and 24h0m0s, got
// 25h0m0s."
func Invalid(kind errs.Kind, format string, args ...any) error {
	e := kind.Newf(format, args...)
	head := strings.TrimSuffix(kind.Message, ".")
	if len(e.Detail) >= len(head) && strings.EqualFold(e.Detail[:len(head)], head) {
		// The detail says it all ("max attempts must be positive, got 0").
		e.Message = head + e.Detail[len(head):] + "."
	} else {
		e.Message = head + ": " + e.Detail + "."
	}
	return e
}

// The job type errors, shared by every request that names a job type or
// filters by one.
var (
	jobTypeBlank = errs.Validation("job.job_type_blank",
		"Job type must not be blank.")
	jobTypeInvalid = errs.Validation("job.job_type_invalid",
		"Job type must be valid UTF-8 without NUL bytes.")
	jobTypeTooLong = errs.Validation("job.job_type_too_long",
		"Job type is too long (at most 255 bytes).")
)

// JobType checks a job type, or a job type filter: non-blank after
// trimming Unicode white space, valid UTF-8 without NUL, at most
// runledger.MaxJobTypeBytes (job.job_type_blank, job.job_type_invalid,
// job.job_type_too_long).
func JobType(jobType string) error {
	switch Text(jobType, runledger.MaxJobTypeBytes) {
	case Blank:
		return Invalid(jobTypeBlank, "job type %q is blank", jobType)
	case Unclean:
		return Invalid(jobTypeInvalid, "job type holds a NUL byte or invalid UTF-8")
	case TooLong:
		return Invalid(jobTypeTooLong, "job type must be at most %d bytes, got %d", runledger.MaxJobTypeBytes, len(jobType))
	}
	return nil
}

// Limit checks that n is between 1 and runledger.MaxLimit, refusing it
// with kind and naming it what.
func Limit(n int, kind errs.Kind, what string) error {
	if n < 1 || n > runledger.MaxLimit {
		return Invalid(kind, "%s must be between 1 and %d, got %d", what, runledger.MaxLimit, n)
	}
	return nil
}

// JSONLimit returns the limit a request's max field sets: max itself, or
// runledger.DefaultMaxJSONBytes when max is not positive.
func JSONLimit(max int) int {
	if max <= 0 {
		return runledger.DefaultMaxJSONBytes
	}
	return max
}
