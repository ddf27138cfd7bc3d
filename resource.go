package runledger

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxExecutionResourceKeyBytes is the longest execution resource key.
const MaxExecutionResourceKeyBytes = 512

// ValidateExecutionResourceKey checks an execution resource key: not blank
// after trimming Unicode white space, at most 512 bytes, valid UTF-8
// without NUL (which PostgreSQL text cannot hold). It fails with Validation
// code job.invalid_execution_resource_key. Jobs that share a key never hold
// a lease at the same time.
func ValidateExecutionResourceKey(key string) error {
	if strings.TrimSpace(key) == "" || len(key) > MaxExecutionResourceKeyBytes ||
		strings.ContainsRune(key, 0) || !utf8.ValidString(key) {
		return Validation(CodeInvalidExecutionResourceKey,
			"Execution resource key must be non-blank and at most 512 bytes.",
			fmt.Sprintf("execution resource key is blank, holds NUL or invalid UTF-8, or is %d bytes long", len(key)))
	}
	return nil
}
