// Package validate holds the primitives the requests of the library share:
// what makes a string blank, what PostgreSQL text and jsonb cannot store,
// the scope, operator and job type rules, and the limits on pages. Each
// request checks itself in its own Validate method, in the package that
// owns it, with these primitives; a rule only one request has lives in
// that method, not here.
package validate

import (
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// Fault says why a text was refused; OK when it was not.
type Fault int

// The faults, in the order Text checks them.
const (
	OK      Fault = iota
	Blank         // empty after strings.TrimSpace
	Unclean       // holds a NUL byte or invalid UTF-8
	TooLong       // over the byte limit
)

// Text checks s: blank after trimming Unicode white space, then NUL or
// invalid UTF-8 (which PostgreSQL text cannot store), then longer than max
// bytes (no limit when max is 0). It returns the first fault.
func Text(s string, max int) Fault {
	switch {
	case strings.TrimSpace(s) == "":
		return Blank
	case !Clean(s):
		return Unclean
	case max > 0 && len(s) > max:
		return TooLong
	}
	return OK
}

// Clean reports whether s is valid UTF-8 without NUL.
func Clean(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

var invalidOrganization = errs.Validation(runledger.CodeOrganizationInvalid,
	"Organization id must not be the nil UUID.")

// Scope refuses runledger.Organization(uuid.Nil): the nil UUID stores the
// global scope, so accepting it would act in Global under another name.
func Scope(s runledger.Scope) error {
	if id, ok := s.OrganizationID(); ok && id == uuid.Nil {
		return invalidOrganization.New("the organization id is the nil UUID, which stores the global scope")
	}
	return nil
}

// OrganizationID is Scope for a job's nullable organization_id: nil is
// the global scope, a pointer to the nil UUID is refused.
func OrganizationID(id *uuid.UUID) error {
	return Scope(runledger.ScopeOf(id))
}

// MaxOperatorBytes is the longest operator name an action records.
const MaxOperatorBytes = 255

var invalidOperator = errs.Validation("job.operator_invalid",
	"Operator must be non-blank UTF-8 without NUL bytes, at most 255 bytes.")

// Operator checks the optional operator an action records in its event
// and returns it as the nullable statement argument: "" is no operator
// (nil, and the event's payload is unchanged); anything else must pass
// Text with MaxOperatorBytes, or it is the Validation error
// job.operator_invalid.
func Operator(op string) (*string, error) {
	if op == "" {
		return nil, nil
	}
	if Text(op, MaxOperatorBytes) != OK {
		return nil, invalidOperator.Newf("operator of %d bytes is blank, holds NUL or invalid UTF-8, or is too long", len(op))
	}
	return &op, nil
}

// OperatorArg is an operator Operator accepted, as the statement's
// nullable argument: nil for "".
func OperatorArg(op string) *string {
	if op == "" {
		return nil
	}
	return &op
}
