package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Fuzz targets of the command line's parsers of untrusted input: the
// --from line formats (read as a stream) and the flag values for
// durations, times, UUIDs, sizes and job type lists. Their seed corpora
// run with the ordinary tests; `make fuzz` runs each for FUZZTIME.

// maxMessage bounds every refusal's message: an excerpt, never the input.
const maxMessage = 600

// FuzzFromLines reads any input as the --from list of replay-bulk and of
// requeue-bulk: no panic; a refusal is a validation error that names its
// line with a bounded message; every accepted source line, printed back in
// its canonical form, parses to the same source.
func FuzzFromLines(f *testing.F) {
	id := uuid.MustParse("0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f")
	for _, s := range []string{
		id.String() + " 1\n", "# c\n\n" + id.String() + "\t2\r\n", id.String() + " DEAD_LETTERED 3\n",
		id.String() + " CANCELED 1", "x 1\n", id.String() + " 0\n", id.String() + " 2147483648\n",
		"{" + id.String() + "} 1\n", strings.Repeat("a", maxInputLine+1), "\xff\xfe 1\n", id.String() + " 1 extra\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		in := inputSource{cmd: "fuzz", name: "--from stdin", maxBytes: 1 << 20}
		checkReplay := func(n int, text []byte) error {
			src, _, err := replaySources.line("stdin", n, text)
			if err == errSkip {
				return nil
			}
			if err == nil {
				again, _, err2 := replaySources.line("stdin", n, []byte(fmt.Sprintf("%s %d", src.JobID, src.ExpectedRunNumber)))
				if err2 != nil || again != src {
					t.Fatalf("line %q parsed to %+v, which does not print back (%v)", text, src, err2)
				}
			}
			return err
		}
		checkRequeue := func(n int, text []byte) error {
			src, _, err := requeueSources.line("stdin", n, text)
			if err == errSkip {
				return nil
			}
			if err == nil {
				again, _, err2 := requeueSources.line("stdin", n, []byte(fmt.Sprintf("%s %s %d", src.JobID, src.ExpectedStatus, src.ExpectedRunNumber)))
				if err2 != nil || again != src {
					t.Fatalf("line %q parsed to %+v, which does not print back (%v)", text, src, err2)
				}
			}
			return err
		}
		for _, check := range []func(int, []byte) error{checkReplay, checkRequeue} {
			var spool bytes.Buffer
			n, err := readLines(context.Background(), in, bytes.NewReader(input), &spool, check)
			if err == nil {
				if !bytes.Equal(spool.Bytes(), input) {
					t.Fatalf("spooled %d bytes of %d", spool.Len(), len(input))
				}
				continue
			}
			e := asError(err)
			if e == nil || e.Category != "validation" {
				t.Fatalf("refusal %v is not a validation error", err)
			}
			if len(e.Message) > maxMessage || !strings.Contains(e.Message, fmt.Sprintf("line %d", n)) {
				t.Fatalf("refusal of line %d: message of %d bytes %q", n, len(e.Message), e.Message)
			}
		}
	})
}

// FuzzFlagValues sets any text as a duration, time, UUID, size and job
// type list flag: no panic, bounded messages, and every accepted value
// prints back to the same value.
func FuzzFlagValues(f *testing.F) {
	for _, s := range []string{
		"30s", "1h30m", "-5m", "9223372036854775807ns", "1e3s", " 5m ", "", "2026-11-30T09:00:00Z",
		"2026-11-30T10:00:00.123456789+01:00", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999-23:59",
		"0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f", "{0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f}", "urn:uuid:0b6f6f2e-7a8a-4a43-9d2c-8f0f8f0f8f0f",
		"0b6f6f2e7a8a4a439d2c8f0f8f0f8f0f", "64MiB", "1", "a,b", " a ,b", ",", "a,,b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bounded := func(what string, err error) {
			if err != nil && len(err.Error()) > maxMessage {
				t.Fatalf("%s %q: message of %d bytes", what, s, len(err.Error()))
			}
		}
		var d durationValue
		err := d.Set(s)
		bounded("duration", err)
		if err == nil {
			var again durationValue
			if err := again.Set(d.String()); err != nil || again.d != d.d {
				t.Fatalf("duration %q = %s does not print back", s, d.d)
			}
		}
		var tv timeValue
		err = tv.Set(s)
		bounded("time", err)
		if err == nil {
			var again timeValue
			if err := again.Set(tv.String()); err != nil || !again.p.Equal(*tv.p) || tv.p.Location() != time.UTC {
				t.Fatalf("time %q = %v does not print back", s, *tv.p)
			}
		}
		var u uuidValue
		err = u.Set(s)
		bounded("uuid", err)
		if err == nil {
			var again uuidValue
			if err := again.Set(u.String()); err != nil || *again.p != *u.p {
				t.Fatalf("uuid %q = %s does not print back", s, u.p)
			}
		}
		var size int64
		bv := &byteSizeValue{p: &size}
		err = bv.Set(s)
		bounded("size", err)
		if err == nil && size < 1 {
			t.Fatalf("size %q = %d accepted", s, size)
		}
		var types jobTypesValue
		err = types.Set(s)
		bounded("job types", err)
		if err == nil {
			if strings.Join(types, ",") != s {
				t.Fatalf("job types %q = %q: not taken exactly", s, []string(types))
			}
			for _, typ := range types {
				if strings.TrimSpace(typ) == "" {
					t.Fatalf("job types %q: blank item accepted", s)
				}
			}
		}
	})
}
