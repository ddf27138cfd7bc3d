package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/runledger-go/runledger"
)

// MaxIdempotencyKeyBytes is the longest accepted idempotency key, in bytes
// of UTF-8; exactly 512 bytes is valid.
const MaxIdempotencyKeyBytes = 512

// cleanText reports whether s is valid UTF-8 without NUL, which PostgreSQL
// text cannot store.
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

func invalid(base *runledger.Error, format string, args ...any) error {
	return runledger.New(base, fmt.Sprintf(format, args...))
}

// validateJobType checks a job type: non-blank after trimming Unicode white
// space, valid UTF-8 without NUL.
func validateJobType(jobType string) error {
	switch {
	case strings.TrimSpace(jobType) == "":
		return invalid(runledger.ErrJobTypeBlank, "job type %q is blank", jobType)
	case !cleanText(jobType):
		return invalid(runledger.ErrJobTypeInvalid, "job type holds a NUL byte or invalid UTF-8")
	}
	return nil
}

// validateWorkerID checks a worker id like a job type.
func validateWorkerID(workerID string) error {
	switch {
	case strings.TrimSpace(workerID) == "":
		return invalid(runledger.ErrWorkerIDBlank, "worker id %q is blank", workerID)
	case !cleanText(workerID):
		return invalid(runledger.ErrWorkerIDInvalid, "worker id holds a NUL byte or invalid UTF-8")
	}
	return nil
}

// validateLimit checks that n is between 1 and MaxLimit.
func validateLimit(n int, base *runledger.Error, what string) error {
	if n < 1 || n > MaxLimit {
		return invalid(base, "%s must be between 1 and %d, got %d", what, MaxLimit, n)
	}
	return nil
}

// validateJSON checks that b is one JSON value that PostgreSQL's jsonb can
// store: valid UTF-8, valid JSON, no \u0000 escape and no unpaired UTF-16
// surrogate escape (jsonb refuses both). It does not parse b twice: after
// json.Valid it only scans the escapes.
func validateJSON(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("not valid UTF-8")
	}
	if !json.Valid(b) {
		return fmt.Errorf("not valid JSON")
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return nil
	}
	// Backslashes occur only inside strings of valid JSON, and each starts
	// one escape.
	pendingHigh := false
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			if pendingHigh {
				return fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
			continue
		}
		i++ // json.Valid guarantees a character follows.
		if b[i] != 'u' {
			if pendingHigh {
				return fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
			continue
		}
		var r rune
		for _, c := range b[i+1 : i+5] {
			r = r<<4 | rune(hexValue(c))
		}
		i += 4
		switch {
		case r == 0:
			return fmt.Errorf(`holds \u0000, which jsonb cannot store`)
		case r >= 0xD800 && r <= 0xDBFF:
			if pendingHigh {
				return fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
			pendingHigh = true
		case r >= 0xDC00 && r <= 0xDFFF:
			if !pendingHigh {
				return fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return fmt.Errorf("unpaired UTF-16 surrogate escape")
			}
		}
	}
	if pendingHigh {
		return fmt.Errorf("unpaired UTF-16 surrogate escape")
	}
	return nil
}

func hexValue(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
