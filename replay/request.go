package replay

import (
	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/validate"
)

// MaxReasonBytes is the longest accepted reason, in bytes of UTF-8. The
// request key's limit is runledger.MaxKeyBytes.
const MaxReasonBytes = 4096

// The request-validation errors, all category Validation.
var (
	errKeyBlank = errs.Validation("job.replay_request_key_blank",
		"Job replay request key must not be blank.")
	errKeyInvalid = errs.Validation("job.replay_request_key_invalid",
		"Job replay request key must be valid UTF-8 without NUL bytes.")
	errKeyTooLong = errs.Validation("job.replay_request_key_too_long",
		"Job replay request key is too long (at most 512 bytes).")
	errReasonBlank = errs.Validation("job.replay_reason_blank",
		"Job replay reason must not be blank.")
	errReasonInvalid = errs.Validation("job.replay_reason_invalid",
		"Job replay reason must be valid UTF-8 without NUL bytes.")
	errReasonTooLong = errs.Validation("job.replay_reason_too_long",
		"Job replay reason is too long (at most 4096 bytes).")
)

// errReplayMissingExisting is the Internal error of a lineage row whose
// replay job could not be loaded.
var errReplayMissingExisting = errs.Internal("job.replay_idempotency_conflict_missing_existing",
	"Job replay retry could not be resolved.")

// Request asks to replay one succeeded job.
type Request struct {
	// Scope is the caller's tenant; the source must belong to exactly this
	// scope or the outcome is NotFound. Derive it from the source job the
	// caller authorized (runledger.ScopeOf(job.OrganizationID)).
	Scope runledger.Scope
	// SourceJobID is the job to replay.
	SourceJobID uuid.UUID
	// ExpectedRunNumber is the run the caller observed as SUCCEEDED. It is
	// not validated: zero or a negative run simply never matches.
	ExpectedRunNumber int32
	// Key identifies one replay action for this source run. A retry of the
	// same action uses the same key (and reason) and gets the same replay
	// back; a new, intentional replay uses a new key. Stored as given,
	// compared byte for byte.
	Key string
	// Reason is recorded in the lineage and the replay's ENQUEUED event. A
	// retry must repeat it exactly: the same key with another reason is an
	// idempotency conflict.
	Reason string
	// Operator, when not "", names who asked for the replay (a console
	// user, say); it is recorded in the replay's ENQUEUED event as
	// "operator". "" records nothing: the payload keeps its five keys.
	Operator string
}

// Validate checks the request's scope, key and reason without touching
// the database, in this order, returning the first failure as a
// Validation error: Organization(uuid.Nil) (job.organization_invalid), key
// blank after trimming Unicode white space
// (job.replay_request_key_blank), key holding a NUL byte or invalid UTF-8
// (job.replay_request_key_invalid), key over runledger.MaxKeyBytes
// (job.replay_request_key_too_long), then the same three for the reason
// (job.replay_reason_blank, job.replay_reason_invalid,
// job.replay_reason_too_long), then the operator when set: blank, NUL,
// invalid UTF-8 or over 255 bytes is job.operator_invalid. Nothing is
// trimmed or changed.
func (r Request) Validate() error {
	if err := validate.Scope(r.Scope); err != nil {
		return err
	}
	switch validate.Text(r.Key, runledger.MaxKeyBytes) {
	case validate.Blank:
		return errKeyBlank.New("job replay request key was blank")
	case validate.Unclean:
		return errKeyInvalid.New("job replay request key held a NUL byte or invalid UTF-8")
	case validate.TooLong:
		return errKeyTooLong.Newf("job replay request key must be at most %d bytes, got %d", runledger.MaxKeyBytes, len(r.Key))
	}
	switch validate.Text(r.Reason, MaxReasonBytes) {
	case validate.Blank:
		return errReasonBlank.New("job replay reason was blank")
	case validate.Unclean:
		return errReasonInvalid.New("job replay reason held a NUL byte or invalid UTF-8")
	case validate.TooLong:
		return errReasonTooLong.Newf("job replay reason must be at most %d bytes, got %d", MaxReasonBytes, len(r.Reason))
	}
	_, err := validate.Operator(r.Operator)
	return err
}
