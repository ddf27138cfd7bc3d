package main

import (
	"errors"
	"io"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"
)

// Text helpers of the bulk commands: the resume command, counts and
// durations for people.

// resumeCommand is the command line that resumes the action: the same
// one, shell-quoted, with a database URL's password hidden, and extra
// arguments added after the flags (before a "--" that ends them).
func resumeCommand(argv []string, extra ...string) string {
	parts := []string{"runledger"}
	redact := false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isURL := strings.HasPrefix(a, "-") && name == "database-url" && !redact
		switch {
		case a == "--":
			for _, e := range extra {
				parts = append(parts, shellQuote(e))
			}
			for _, rest := range argv[i:] {
				parts = append(parts, shellQuote(rest))
			}
			return strings.Join(parts, " ")
		case isURL && hasVal:
			a = a[:len(a)-len(val)] + redactPassword(val)
		case isURL && i+1 < len(argv):
			parts = append(parts, shellQuote(a))
			i++
			a = redactPassword(argv[i])
		}
		parts = append(parts, shellQuote(a))
	}
	for _, e := range extra {
		parts = append(parts, shellQuote(e))
	}
	return strings.Join(parts, " ")
}

// isStdin reports whether argv reads the sources from stdin (--from -).
func isStdin(argv []string) bool {
	for i, a := range argv {
		if a == "--" {
			return false
		}
		if a == "--from=-" || a == "-from=-" || ((a == "--from" || a == "-from") && i+1 < len(argv) && argv[i+1] == "-") {
			return true
		}
	}
	return false
}

var dsnPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactPassword hides the password of a database URL or keyword/value
// connection string.
func redactPassword(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return s
	}
	return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
}

// isTerminal reports whether w is a terminal, looking through the
// password's redaction.
func isTerminal(w io.Writer) bool {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// perSecond is n per elapsed second, rounded down.
func perSecond(n int, elapsed time.Duration) int {
	if elapsed <= 0 {
		return 0
	}
	return int(float64(n) / elapsed.Seconds())
}

// progressCount is "done/total" with digit groups.
func progressCount(done, total int) string {
	return groupDigits(done) + "/" + groupDigits(max(total, done))
}

// roundDuration rounds d for display: milliseconds under a minute, then
// seconds.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// count is plural with digit groups: "1 source", "2,500 sources".
func count(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return groupDigits(n) + " " + word + "s"
}

// groupDigits prints n with a comma every three digits: 1,000,000.
func groupDigits(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// pathErrorCause is the reason a file operation failed, without the
// operation and path the message already names.
func pathErrorCause(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// clip quotes s for a message, shortened to about 60 bytes.
func clip(s string) string {
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return strconv.Quote(s)
}
