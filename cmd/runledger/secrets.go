package main

import (
	"errors"
	"strings"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/redact"
)

// The database password never reaches the command's output: run builds
// one redact.Redactor from every connection string the command line could
// use (--database-url as given, DATABASE_URL, and the environment pgx
// reads: PGPASSWORD, the password and service files), hides the password
// in every error (text and --json) and in the resume command, and passes
// stdout and stderr through it (progress, logs, the demo).

// redactorFor returns the Redactor of a command line: the passwords pgx
// finds in each --database-url value of args, in DATABASE_URL, and in the
// environment alone (a connection string without a password takes
// PGPASSWORD's).
func redactorFor(args []string, getenv func(string) string) *redact.Redactor {
	dsns := []string{"", getenv("DATABASE_URL")}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "database-url" {
			continue
		}
		if hasVal {
			dsns = append(dsns, val)
		} else if i+1 < len(args) {
			dsns = append(dsns, args[i+1])
			i++
		}
	}
	r := redact.ForDSNs(dsns...)
	if p := getenv("PGPASSWORD"); p != "" {
		r = redact.New(append(r.Secrets(), p)...)
	}
	return r
}

// redactError returns err with the password hidden from its message and
// detail: a copy of the *runledger.Error in its chain, or, for any other
// error, an internal error (as describe reports it) with hidden text.
func redactError(r *redact.Redactor, err error) error {
	if err == nil || r.Empty() {
		return err
	}
	var e *runledger.Error
	if !errors.As(err, &e) {
		return &runledger.Error{Code: "cli.internal", Category: runledger.CategoryInternal, Message: r.String(err.Error())}
	}
	out := *e
	out.Message, out.Detail = r.String(e.Message), r.String(e.Detail)
	out.Err = nil // the cause's text is not printed; it may hold the password
	return &out
}
