package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/replay"
)

// replayValidationMessages are the client messages of the request
// validation codes: fixed text, never the caller's bytes.
var replayValidationMessages = map[runledger.Code]string{
	"job.replay_request_key_blank":    "Job replay request key must not be blank.",
	"job.replay_request_key_invalid":  "Job replay request key must be valid UTF-8 without NUL bytes.",
	"job.replay_request_key_too_long": "Job replay request key is too long (at most 512 bytes).",
	"job.replay_reason_blank":         "Job replay reason must not be blank.",
	"job.replay_reason_invalid":       "Job replay reason must be valid UTF-8 without NUL bytes.",
	"job.replay_reason_too_long":      "Job replay reason is too long (at most 4096 bytes).",
}

// expectedValidation is the documented rule set of Request.Validate,
// written out independently: key blank, key NUL or invalid UTF-8, key over
// 512 bytes, then the same for the reason (4096 bytes); the first failure
// wins; "" when the request is valid.
func expectedValidation(key, reason string) string {
	check := func(s string, max int, blank, invalid, tooLong string) string {
		switch {
		case strings.TrimSpace(s) == "":
			return blank
		case !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0:
			return invalid
		case len(s) > max:
			return tooLong
		}
		return ""
	}
	if c := check(key, 512, "job.replay_request_key_blank", "job.replay_request_key_invalid", "job.replay_request_key_too_long"); c != "" {
		return c
	}
	return check(reason, 4096, "job.replay_reason_blank", "job.replay_reason_invalid", "job.replay_reason_too_long")
}

// FuzzRequestValidate feeds Request.Validate keys and reasons of any bytes.
// It must return nil or a *runledger.Error of category Validation with one
// of the six documented codes (never a panic, never Internal), exactly the
// code the documented rules give, with fixed client text; what it accepts
// is storable text (valid UTF-8, no NUL, within the byte limits, not
// blank); and both entry points return the same error before touching the
// database (they are handed a nil pool and a nil transaction, which any
// database work would dereference).
//
// Run with: go test -run '^$' -fuzz '^FuzzRequestValidate$' -fuzztime 10s ./replay/
func FuzzRequestValidate(f *testing.F) {
	for _, c := range validationCases {
		f.Add(c.key, c.reason)
	}
	f.Add("k", "r")
	f.Add(strings.Repeat("k", 512), strings.Repeat("r", 4096))
	f.Add(strings.Repeat("é", 256), "\u00a0ok\u2003")
	f.Add("\u2028", "r")
	f.Add("\ufeff", "r") // BOM is not white space: a valid key
	f.Add("k", "\xed\xa0\x80")
	f.Fuzz(func(t *testing.T, key, reason string) {
		req := replay.Request{Scope: runledger.Global(), SourceJobID: uuid.Nil, ExpectedRunNumber: 1, Key: key, Reason: reason}
		err := req.Validate()
		want := expectedValidation(key, reason)
		if err == nil {
			if want != "" {
				t.Fatalf("Validate accepted key %q reason %q; the documented rules give %s", key, reason, want)
			}
			// Accepted text is what PostgreSQL text and the CHECKs take.
			for _, s := range []string{key, reason} {
				if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || strings.TrimSpace(s) == "" {
					t.Fatalf("accepted unstorable or blank text %q", s)
				}
			}
			if len(key) > runledger.MaxKeyBytes || len(reason) > replay.MaxReasonBytes {
				t.Fatalf("accepted key of %d bytes, reason of %d", len(key), len(reason))
			}
			return
		}
		var e *runledger.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v (%T) is not a *runledger.Error", err, err)
		}
		if e.Category != runledger.CategoryValidation || runledger.CategoryOf(err) != runledger.CategoryValidation {
			t.Fatalf("category %s for %s, want validation", e.Category, e.Code)
		}
		if string(e.Code) != want {
			t.Fatalf("key %q reason %q: code %s, the documented rules give %q", key, reason, e.Code, want)
		}
		if msg, ok := replayValidationMessages[e.Code]; !ok || e.Message != msg {
			t.Fatalf("code %s message %q, want %q", e.Code, e.Message, msg)
		}
		// Error text is safe to log and to print as JSON: no caller bytes.
		if !utf8.ValidString(e.Error()) || !utf8.ValidString(e.Detail) || e.Detail == "" {
			t.Fatalf("error text not clean UTF-8 or detail empty: %q / %q", e.Error(), e.Detail)
		}
		if e.SQLState != "" || e.Err != nil || runledger.IsTransient(err) {
			t.Fatalf("a validation error carries database state: %+v", e)
		}
		if e.Error() != fmt.Sprintf("%s (%s): %s", e.Message, e.Code, e.Detail) {
			t.Fatalf("Error() = %q", e.Error())
		}

		// Both entry points validate before any database work.
		ctx := context.Background()
		var nilPool *pgxpool.Pool
		out, perr := replay.SucceededJob(ctx, nilPool, req)
		if out != nil || runledger.CodeOf(perr) != e.Code {
			t.Fatalf("SucceededJob: %v, %v; want %s without touching the pool", out, perr, e.Code)
		}
		var nilTx pgx.Tx
		out, terr := replay.SucceededJobTx(ctx, nilTx, req)
		if out != nil || runledger.CodeOf(terr) != e.Code {
			t.Fatalf("SucceededJobTx: %v, %v; want %s without touching the transaction", out, terr, e.Code)
		}
	})
}
