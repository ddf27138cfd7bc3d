package redact_test

import (
	"bytes"
	"io"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runledger-go/runledger/internal/redact"
)

// dsnForms are connection strings in every form pgx accepts, each with
// the password it must yield.
var dsnForms = []struct{ dsn, password string }{
	{"postgres://u:s3cret-pw@localhost:5432/d", "s3cret-pw"},
	{"postgresql://u:p%40ss%2Fw%3Ard@localhost/d", "p@ss/w:rd"},
	{"postgres://u:p%40ss%2fw%3ard@localhost/d", "p@ss/w:rd"},
	{"postgres://u@localhost/d?password=q-secret", "q-secret"},
	{"postgres://localhost/d?user=u&password=sp%20ace+plus", "sp ace+plus"},
	{"postgres://u:first-pw@localhost/d?password=second-pw", "second-pw"},
	{"host=localhost user=u password=kv-secret dbname=d", "kv-secret"},
	{"host=localhost user=u password = spaced-secret dbname=d", "spaced-secret"},
	{"host=localhost user=u password='quoted secret' dbname=d", "quoted secret"},
	{`host=localhost user=u password='it\'s a \\ secret' dbname=d`, `it's a \ secret`},
	{"host=localhost password=first-pw port=5432", "first-pw"},
	{"postgres://u:multi-host-pw@h1:5432,h2:5433/d", "multi-host-pw"},
	{"postgres://u:%E2%82%ACuro-%C3%A9@localhost/d", "€uro-é"},
}

func TestSecretsAreWhatPgxParses(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", "/nonexistent")
	for _, tc := range dsnForms {
		got := redact.Secrets(tc.dsn)
		if len(got) != 1 || got[0] != tc.password {
			t.Errorf("Secrets(%q) = %q, want [%q]", tc.dsn, got, tc.password)
		}
	}
	t.Setenv("PGPASSWORD", "from-the-env")
	if got := redact.Secrets("host=localhost user=u"); len(got) != 1 || got[0] != "from-the-env" {
		t.Errorf("Secrets with PGPASSWORD = %q", got)
	}
}

func TestStringHidesEveryForm(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", "/nonexistent")
	for _, tc := range dsnForms {
		r := redact.ForDSNs(tc.dsn)
		p := tc.password
		for _, text := range []string{
			tc.dsn,
			"cannot connect with " + strconv.Quote(tc.dsn),
			"failed: " + p + ".",
			url.QueryEscape(p), url.PathEscape(p), strings.ToLower(url.QueryEscape(p)),
			strconv.Quote(p), "'" + strings.ReplaceAll(p, "'", `'\''`) + "'",
		} {
			out := r.String(text)
			if leaks(out, p) {
				t.Errorf("%q: String(%q) = %q still holds the password", tc.dsn, text, out)
			}
			var buf bytes.Buffer
			if _, err := r.Writer(&buf).Write([]byte(text)); err != nil {
				t.Fatal(err)
			}
			if leaks(buf.String(), p) {
				t.Errorf("%q: Writer wrote %q", tc.dsn, buf.String())
			}
		}
	}
}

func TestShortPasswordsStayOutOfStreams(t *testing.T) {
	t.Parallel()
	r := redact.New("ab")
	if got := r.String("x ab y"); got != "x "+redact.Mask+" y" {
		t.Errorf("String = %q", got)
	}
	var buf bytes.Buffer
	_, _ = r.Writer(&buf).Write([]byte(`{"about":1}`))
	if buf.String() != `{"about":1}` {
		t.Errorf("Writer changed a stream for a 2-byte secret: %q", buf.String())
	}
	if !redact.New().Empty() || (*redact.Redactor)(nil).String("x") != "x" {
		t.Error("an empty Redactor must hide nothing")
	}
}

// leaks reports whether out holds p in any form a reader could decode.
func leaks(out, p string) bool {
	if strings.Contains(out, p) {
		return true
	}
	for _, f := range []string{url.QueryEscape(p), url.PathEscape(p), strconv.Quote(p)[1 : len(strconv.Quote(p))-1]} {
		if f != p && strings.Contains(out, f) {
			return true
		}
	}
	if dec, err := url.QueryUnescape(out); err == nil && strings.Contains(dec, p) {
		return true
	}
	return false
}

// FuzzRedactDSN: for any connection string pgx accepts with a password P
// of at least 4 bytes, no text built from it holds P once redacted.
func FuzzRedactDSN(f *testing.F) {
	for _, tc := range dsnForms {
		f.Add(tc.dsn)
	}
	f.Add("host=h password=\"dq\" user=u")
	f.Add("postgres://:%00x%00@h/d")
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil || len(cfg.Password) < redact.MinWriterSecret {
			return
		}
		p := cfg.Password
		r := redact.ForDSNs(dsn)
		// The masks are taken out before the search: a password made of
		// the mask's letters ("xxxx") is found in the mask itself, or in a
		// mask followed by the text's next letter, without any leak.
		unmasked := func(out string) string { return strings.ReplaceAll(out, redact.Mask, "\uFFFD") }
		for _, text := range []string{dsn, "cannot use " + strconv.Quote(dsn) + ": " + p, p + p, url.QueryEscape(p)} {
			if out := r.String(text); strings.Contains(unmasked(out), p) || strings.Contains(unmasked(out), url.QueryEscape(p)) {
				t.Fatalf("String(%q) = %q holds password %q", text, out, p)
			}
			var buf bytes.Buffer
			_, _ = r.Writer(&buf).Write([]byte(text))
			if strings.Contains(unmasked(buf.String()), p) {
				t.Fatalf("Writer(%q) = %q holds password %q", text, buf.String(), p)
			}
		}
	})
}

// TestWriterUnwraps: a redacting writer shows what it writes to, so that
// the command line can still tell a terminal.
func TestWriterUnwraps(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := redact.New("long-secret").Writer(&buf)
	u, ok := w.(interface{ Unwrap() io.Writer })
	if !ok || u.Unwrap() != io.Writer(&buf) {
		t.Fatalf("Writer does not unwrap to its destination")
	}
}
