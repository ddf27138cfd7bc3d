// Package redact hides a database password from text. The password is the
// one pgx itself finds in a connection string (pgconn.ParseConfig: URL user
// information, a password= query parameter, keyword/value pairs with any
// spacing and quoting, PGPASSWORD and the password file), never a guess
// from string patterns; a Redactor then removes every occurrence of it
// from text in any of the forms it can take on the way: as given, percent
// encoded (each byte, in either case, or not), backslash-escaped as in a
// quoted keyword/value string, a JSON or Go string, or shell-quoted.
package redact

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask replaces a hidden password.
const Mask = "xxxxx"

// MinWriterSecret is the shortest password, in bytes, that a Writer hides
// in everything written through it. A shorter one (a password of one to
// three characters) would turn every occurrence of a common letter pair in
// unrelated output into the mask and break JSON on stdout; it is still
// hidden from the texts passed to String, which are the ones built from a
// connection string (error messages, the resume command).
const MinWriterSecret = 4

// A Redactor hides a set of secrets. The zero value and nil hide nothing.
type Redactor struct {
	secrets  []string
	literals []string       // the forms of the secrets replaced as bytes, longest first
	all      *regexp.Regexp // every secret
	long     *regexp.Regexp // the secrets of at least MinWriterSecret bytes
}

// Secrets returns the passwords pgx would send for the connection string
// dsn: that of the main configuration and of every fallback (several
// hosts), deduplicated, empty ones left out. It reads the environment
// (PGPASSWORD, the password file) as pgx does. A string pgx cannot parse
// yields the passwords a lenient reading finds in it (URL user
// information, password= in a query or keyword/value form), so that even
// a mistyped connection string never shows its password.
func Secrets(dsn string) []string {
	var out []string
	add := func(p string) {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err == nil {
		add(cfg.Password) // fallbacks (several hosts) share it
		return out
	}
	for _, p := range lenientSecrets(dsn) {
		add(p)
	}
	return out
}

// kvPassword finds password=VALUE in a keyword/value string, quoted or not.
var kvPassword = regexp.MustCompile(`password\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))`)

// lenientSecrets reads a connection string that pgx refused.
func lenientSecrets(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil {
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				out = append(out, p)
			}
		}
		if q, err := url.ParseQuery(u.RawQuery); err == nil {
			out = append(out, q["password"]...)
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		p := m[2]
		if m[1] != "" {
			p = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(m[1])
		}
		out = append(out, p)
		if dec, err := url.QueryUnescape(p); err == nil {
			out = append(out, dec)
		}
	}
	return out
}

// New returns a Redactor hiding secrets (empty ones ignored).
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if s != "" && !slices.Contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
		}
	}
	// Longest first, so that a secret containing another is hidden whole.
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	var all, long []string
	for _, s := range r.secrets {
		r.literals = append(r.literals, literals(s)...)
		alts := forms(s)
		all = append(all, alts...)
		if len(s) >= MinWriterSecret {
			long = append(long, alts...)
		}
	}
	slices.SortStableFunc(r.literals, func(a, b string) int { return len(b) - len(a) })
	r.all = compile(all)
	r.long = compile(long)
	return r
}

// ForDSNs returns a Redactor hiding the secrets of every connection string
// given (see Secrets).
func ForDSNs(dsns ...string) *Redactor {
	var secrets []string
	for _, d := range dsns {
		secrets = append(secrets, Secrets(d)...)
	}
	return New(secrets...)
}

// compile joins alternatives; nil for none. A pattern too large for the
// regexp package (a password of many kilobytes) falls back to its
// literal forms.
func compile(alts []string) *regexp.Regexp {
	if len(alts) == 0 {
		return nil
	}
	re, err := regexp.Compile(strings.Join(alts, "|"))
	if err != nil {
		lits := make([]string, 0, len(alts))
		for _, a := range alts {
			if !strings.HasPrefix(a, "(?:") {
				lits = append(lits, a)
			}
		}
		re, err = regexp.Compile(strings.Join(lits, "|"))
		if err != nil {
			return regexp.MustCompile(`\A\z\A`) // matches nothing; String's literal pass remains
		}
	}
	return re
}

// Empty reports whether r hides nothing.
func (r *Redactor) Empty() bool { return r == nil || len(r.secrets) == 0 }

// String returns s with every form of every secret replaced by Mask.
func (r *Redactor) String(s string) string {
	if r.Empty() {
		return s
	}
	for _, lit := range r.literals {
		s = strings.ReplaceAll(s, lit, Mask)
	}
	return r.all.ReplaceAllLiteralString(s, Mask)
}

// forms returns the patterns that match secret as it may appear in text:
// one that takes each character as given, percent encoded (any case of
// hex digits) or after a backslash (a space also as '+'), and the literal
// JSON, Go-quoted and shell-quoted forms, whose escapes the first does not
// cover.
func forms(secret string) []string {
	var b strings.Builder
	b.WriteString("(?:")
	for i, w := 0, 0; i < len(secret); i += w {
		r, size := utf8.DecodeRuneInString(secret[i:])
		w = size
		ch := secret[i : i+size]
		b.WriteString(`(?:`)
		if r != utf8.RuneError || size > 1 {
			b.WriteString(`\\?`)
		}
		if r != utf8.RuneError || size > 1 {
			// An invalid byte is hidden by String's literal pass, or
			// matched here percent-encoded only.
			b.WriteString(regexp.QuoteMeta(ch) + "|")
		}
		for j := 0; j < len(ch); j++ {
			b.WriteString("%" + hexAnyCase(ch[j]>>4) + hexAnyCase(ch[j]&0xf))
		}
		if ch == " " {
			b.WriteString(`|\+`)
		}
		b.WriteString(")")
	}
	b.WriteString(")")
	out := []string{b.String()}
	quoted := strconv.Quote(secret)
	js, _ := json.Marshal(secret)
	shell := strings.ReplaceAll(secret, `'`, `'\''`)
	for _, lit := range []string{quoted[1 : len(quoted)-1], string(js[1 : len(js)-1]), shell, url.QueryEscape(secret), url.PathEscape(secret)} {
		// A form that is not valid UTF-8 cannot be a pattern; String's
		// literal pass hides it (see literals).
		if lit != secret && lit != "" && utf8.ValidString(lit) {
			out = append(out, regexp.QuoteMeta(lit))
		}
	}
	// Longest alternatives first: Go's regexp prefers the leftmost
	// alternative, not the longest match.
	slices.SortStableFunc(out[1:], func(a, b string) int { return len(b) - len(a) })
	return append(out[1:], out[0])
}

// literals are the forms of secret replaced byte for byte before the
// patterns run: the secret itself and its escaped forms, which may not be
// valid UTF-8 (a password given percent encoded can hold any byte).
func literals(secret string) []string {
	quoted := strconv.Quote(secret)
	out := []string{secret, quoted[1 : len(quoted)-1], strings.ReplaceAll(secret, `'`, `'\''`),
		url.QueryEscape(secret), url.PathEscape(secret), strings.ToLower(url.QueryEscape(secret))}
	return slices.Compact(out)
}

func hexAnyCase(n byte) string {
	const hex = "0123456789abcdef"
	c := hex[n]
	if c >= 'a' {
		return "[" + string(c) + strings.ToUpper(string(c)) + "]"
	}
	return string(c)
}

// Writer returns a writer that hides r's secrets of at least
// MinWriterSecret bytes in each Write before passing it to w. A secret
// split across two Writes is not seen: write whole lines. It reports
// len(p) written when w took the redacted text.
func (r *Redactor) Writer(w io.Writer) io.Writer {
	if r.Empty() || r.long == nil {
		return w
	}
	return &writer{r: r, w: w}
}

type writer struct {
	r *Redactor
	w io.Writer
}

// Unwrap returns the writer w writes to, so that a caller can still ask
// whether output goes to a terminal.
func (w *writer) Unwrap() io.Writer { return w.w }

func (w *writer) Write(p []byte) (int, error) {
	out := p
	for _, lit := range w.r.literals {
		if len(lit) >= MinWriterSecret {
			out = bytes.ReplaceAll(out, []byte(lit), []byte(Mask))
		}
	}
	out = w.r.long.ReplaceAllLiteral(out, []byte(Mask))
	if _, err := w.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Secrets returns the secrets r hides, longest first.
func (r *Redactor) Secrets() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.secrets)
}
