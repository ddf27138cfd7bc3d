package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
)

// enqueueValidationCodes are the codes EnqueueRequest.Validate documents,
// in the order it checks them.
var enqueueValidationCodes = []runledger.Code{
	"job.job_type_blank",
	"job.job_type_invalid",
	"job.job_type_too_long",
	"job.payload_too_large",
	"job.payload_invalid",
	"job.max_attempts_invalid",
	"job.timeout_invalid",
	"job.run_at_invalid",
	"job.idempotency_key_invalid",
	"job.invalid_execution_resource_key",
}

func clean(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// expectedEnqueueCode is the documented rule set of EnqueueRequest.Validate
// written out independently; "" when the request is valid.
func expectedEnqueueCode(r jobs.EnqueueRequest) string {
	switch {
	case strings.TrimSpace(r.JobType) == "":
		return "job.job_type_blank"
	case !clean(r.JobType):
		return "job.job_type_invalid"
	case len(r.JobType) > 255:
		return "job.job_type_too_long"
	case r.Payload != nil && len(r.Payload) > 1<<20:
		return "job.payload_too_large"
	case r.Payload != nil && !jsonbStorable(r.Payload):
		return "job.payload_invalid"
	case r.MaxAttempts != nil && *r.MaxAttempts <= 0:
		return "job.max_attempts_invalid"
	case r.TimeoutSeconds != nil && *r.TimeoutSeconds <= 0:
		return "job.timeout_invalid"
	case r.RunAt != nil && (r.RunAt.IsZero() || r.RunAt.UTC().Year() < 1 || r.RunAt.UTC().Year() > 9999):
		return "job.run_at_invalid"
	case r.IdempotencyKey != "" && (strings.TrimSpace(r.IdempotencyKey) == "" || !clean(r.IdempotencyKey) || len(r.IdempotencyKey) > 512):
		return "job.idempotency_key_invalid"
	case r.ExecutionResourceKey != "" && (strings.TrimSpace(r.ExecutionResourceKey) == "" || !clean(r.ExecutionResourceKey) || len(r.ExecutionResourceKey) > 512):
		return "job.invalid_execution_resource_key"
	}
	return ""
}

// FuzzEnqueueRequestValidate feeds jobs.EnqueueRequest.Validate arbitrary
// job types, payloads, settings, run-at times and keys. It must return nil
// or a *runledger.Error of category Validation with one of the documented
// codes, exactly the one the documented rules give (first failure wins),
// never panic; an accepted request holds only text PostgreSQL can store;
// and both entry points return the same error before touching the database
// (they are handed a nil pool and a nil transaction).
//
// Run with: go test -run '^$' -fuzz '^FuzzEnqueueRequestValidate$' -fuzztime 10s ./reliability/
func FuzzEnqueueRequestValidate(f *testing.F) {
	f.Add("email", []byte(`{"to":"a@example.com"}`), true, int32(3), int32(60), int64(1700000000), uint8(7), "order-1", "printer-1")
	f.Add(" ", []byte(nil), false, int32(0), int32(0), int64(0), uint8(0), "", "")
	f.Add("e\x00", []byte(`{}`), true, int32(1), int32(1), int64(0), uint8(0), "", "")
	f.Add("email", []byte(`{"a":"\u0000"}`), true, int32(1), int32(1), int64(0), uint8(0), "", "")
	f.Add("email", []byte(`"\ud800"`), true, int32(1), int32(1), int64(0), uint8(0), "", "")
	f.Add("email", []byte(`"\ud83d\ude00"`), true, int32(1), int32(1), int64(0), uint8(0), "", "")
	f.Add("email", []byte("{\"a\":\"\xff\"}"), true, int32(1), int32(1), int64(0), uint8(0), "", "")
	f.Add("email", []byte(`{}`), true, int32(-1), int32(1), int64(0), uint8(1), "", "")
	f.Add("email", []byte(`{}`), true, int32(1), int32(0), int64(0), uint8(2), "", "")
	f.Add("email", []byte(`{}`), true, int32(1), int32(1), int64(-62135596801), uint8(4), "", "")
	f.Add("email", []byte(`{}`), true, int32(1), int32(1), int64(253402300800), uint8(4), "", "")
	f.Add("email", []byte(`{}`), true, int32(1), int32(1), int64(0), uint8(0), "\u3000", "")
	f.Add("email", []byte(`{}`), true, int32(1), int32(1), int64(0), uint8(0), strings.Repeat("k", 513), "")
	f.Add("email", []byte(`{}`), true, int32(1), int32(1), int64(0), uint8(0), "k", "\xff")
	f.Add("email", []byte(`{}`), true, int32(1), int32(1), int64(0), uint8(0), "k", "\u00a0")
	f.Fuzz(func(t *testing.T, jobType string, payload []byte, hasPayload bool, maxAttempts, timeout int32,
		runAtUnix int64, mask uint8, key, resourceKey string) {
		r := jobs.EnqueueRequest{JobType: jobType, IdempotencyKey: key, ExecutionResourceKey: resourceKey}
		if hasPayload {
			r.Payload = payload
			if r.Payload == nil {
				r.Payload = []byte{}
			}
		}
		if mask&1 != 0 {
			r.MaxAttempts = &maxAttempts
		}
		if mask&2 != 0 {
			r.TimeoutSeconds = &timeout
		}
		if mask&4 != 0 {
			at := time.Unix(runAtUnix, 0)
			if mask&8 != 0 {
				at = time.Time{}
			}
			r.RunAt = &at
		}
		err := r.Validate()
		want := expectedEnqueueCode(r)
		if err == nil {
			if want != "" {
				t.Fatalf("Validate accepted %+v; the documented rules give %s", r, want)
			}
			if r.Payload != nil {
				var v any
				if jerr := json.Unmarshal(r.Payload, &v); jerr != nil {
					t.Fatalf("accepted payload %q does not decode: %v", r.Payload, jerr)
				}
				if containsNUL(v) {
					t.Fatalf("accepted payload %q decodes to a string with NUL, which jsonb refuses", r.Payload)
				}
			}
			return
		}
		var e *runledger.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v (%T) is not a *runledger.Error", err, err)
		}
		if e.Category != runledger.CategoryValidation || string(e.Code) != want {
			t.Fatalf("%+v: %s/%s, the documented rules give %s/validation", r, e.Code, e.Category, want)
		}
		known := false
		for _, c := range enqueueValidationCodes {
			known = known || c == e.Code
		}
		if !known || e.Message == "" || !utf8.ValidString(e.Error()) {
			t.Fatalf("undocumented code or unclean text: %+v", e)
		}

		ctx := context.Background()
		var nilPool *pgxpool.Pool
		if _, perr := jobs.Enqueue(ctx, nilPool, r); runledger.CodeOf(perr) != e.Code {
			t.Fatalf("Enqueue: %v, want %s before touching the pool", perr, e.Code)
		}
		var nilTx pgx.Tx
		if _, terr := jobs.EnqueueTx(ctx, nilTx, r); runledger.CodeOf(terr) != e.Code {
			t.Fatalf("EnqueueTx: %v, want %s before touching the transaction", terr, e.Code)
		}
	})
}

// jsonbStorable is what PostgreSQL's jsonb input accepts, written from its
// documented rules: valid UTF-8, one valid JSON value, and no \u escape
// that jsonb refuses: \u0000, or a UTF-16 surrogate escape that is not a
// high surrogate immediately followed by a low one.
// TestPayloadRulesAgreeWithPostgres checks it against the server.
func jsonbStorable(b []byte) bool {
	if !utf8.Valid(b) || !json.Valid(b) {
		return false
	}
	hex4 := func(h []byte) rune {
		var r rune
		for _, c := range h {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			default:
				r = r<<4 | rune(c-'A'+10)
			}
		}
		return r
	}
	// In valid JSON a backslash occurs only inside a string, where it
	// starts an escape; \u is followed by four hex digits.
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' {
			i++
			continue
		}
		r := hex4(b[i+2 : i+6])
		switch {
		case r == 0, r >= 0xDC00 && r <= 0xDFFF:
			return false
		case r >= 0xD800 && r <= 0xDBFF:
			if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
				return false
			}
			if lo := hex4(b[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
		i += 5
	}
	return true
}

// TestPayloadRulesAgreeWithPostgres feeds the payloads of the fuzz seeds
// and a few more to PostgreSQL's jsonb input, to Validate and to
// jsonbStorable: all three must agree on what is storable.
func TestPayloadRulesAgreeWithPostgres(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	e := newEnv(t)
	payloads := []string{
		`{}`, `[]`, `null`, `1e400`, `"\u0000"`, `"\\u0000"`, `"a\u0000b"`, `"\ud800"`, `"\udc00"`,
		`"\ud800\udc00"`, `"\uD83D\uDE00"`, `"\ud800\ud800\udc00"`, `"\ud800x"`, `"\ud800\n"`,
		`"\udbff\udfff"`, `{"\u0000":1}`, `{"k":"\u00e9\u0001"}`, "\"\xff\"", `{} {}`, ``, ` `,
		`"\U0000"`, `[1,2,`, "\"\u2028\"", `"\/"`, `{"a":{"b":["\ud83d"]}}`,
	}
	for _, p := range payloads {
		b := []byte(p)
		validated := jobs.EnqueueRequest{JobType: "email", Payload: b}.Validate() == nil
		// Invalid UTF-8 fails as the text parameter already.
		_, err := e.admin.Exec(ctx, `SELECT $1::text::jsonb`, p)
		stored := err == nil
		if validated != stored || jsonbStorable(b) != stored {
			t.Errorf("payload %q: Validate accepts %v, jsonbStorable %v, PostgreSQL stores %v (%v)",
				p, validated, jsonbStorable(b), stored, err)
		}
	}
}

func containsNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.ContainsRune(x, 0)
	case []any:
		for _, e := range x {
			if containsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) || containsNUL(e) {
				return true
			}
		}
	}
	return false
}
