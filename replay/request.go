package replay

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
)

// Limits on the request's text, in bytes of UTF-8.
const (
	// MaxKeyBytes is the longest accepted request key; exactly 512 bytes is
	// valid. The job_replays CHECK enforces the same bound.
	MaxKeyBytes = 512
	// MaxReasonBytes is the longest accepted reason.
	MaxReasonBytes = 4096
)

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
}

// Validate checks the request's key and reason without touching the
// database, in this order, returning the first failure as a Validation
// error: key blank after trimming Unicode white space
// (job.replay_request_key_blank), key holding a NUL byte or invalid UTF-8
// (job.replay_request_key_invalid), key over MaxKeyBytes
// (job.replay_request_key_too_long), then the same three for the reason
// (job.replay_reason_blank, job.replay_reason_invalid,
// job.replay_reason_too_long). Nothing is trimmed or changed.
func (r Request) Validate() error {
	switch {
	case strings.TrimSpace(r.Key) == "":
		return runledger.Validation(runledger.CodeReplayRequestKeyBlank,
			"Job replay request key must not be blank.", "job replay request key was blank")
	case !cleanText(r.Key):
		return runledger.Validation(runledger.CodeReplayRequestKeyInvalid,
			"Job replay request key must be valid UTF-8 without NUL bytes.",
			"job replay request key held a NUL byte or invalid UTF-8")
	case len(r.Key) > MaxKeyBytes:
		return runledger.Validation(runledger.CodeReplayRequestKeyTooLong,
			"Job replay request key is too long.",
			fmt.Sprintf("job replay request key must be at most %d bytes, got %d", MaxKeyBytes, len(r.Key)))
	case strings.TrimSpace(r.Reason) == "":
		return runledger.Validation(runledger.CodeReplayReasonBlank,
			"Job replay reason must not be blank.", "job replay reason was blank")
	case !cleanText(r.Reason):
		return runledger.Validation(runledger.CodeReplayReasonInvalid,
			"Job replay reason must be valid UTF-8 without NUL bytes.",
			"job replay reason held a NUL byte or invalid UTF-8")
	case len(r.Reason) > MaxReasonBytes:
		return runledger.Validation(runledger.CodeReplayReasonTooLong,
			"Job replay reason is too long.",
			fmt.Sprintf("job replay reason must be at most %d bytes, got %d", MaxReasonBytes, len(r.Reason)))
	}
	return nil
}

// cleanText reports whether s is valid UTF-8 without NUL, which PostgreSQL
// text cannot store.
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
