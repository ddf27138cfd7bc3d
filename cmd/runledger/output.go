package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/runledger-go/runledger"
)

// Exit codes.
const (
	exitOK       = 0 // done
	exitError    = 1 // any other error: database unreachable, transient, internal
	exitUsage    = 2 // usage or validation error
	exitMismatch = 3 // expectation mismatch (replay outcome, lease compare-and-set)
	exitNotFound = 4 // not found in the caller's scope
	exitConflict = 5 // conflict with stored state
)

// exitCode maps an error to the process exit code by its category, except
// that a failed lease compare-and-set (job.lease_mismatch, category
// conflict) is an expectation mismatch: the caller's view of the lease
// (run, attempt, worker) is not the job's.
func exitCode(err error) int {
	if runledger.CodeOf(err) == runledger.CodeLeaseMismatch {
		return exitMismatch
	}
	switch runledger.CategoryOf(err) {
	case runledger.CategoryValidation:
		return exitUsage
	case runledger.CategoryNotFound:
		return exitNotFound
	case runledger.CategoryConflict:
		return exitConflict
	}
	return exitError
}

// errorJSON is the shape of an error under --json, on stderr.
type errorJSON struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code     string             `json:"code"`
	Category runledger.Category `json:"category"`
	Message  string             `json:"message"`
}

// describe returns the code, category, client message and internal detail
// of err. An error from outside runledger (a bug, a third-party failure)
// is reported as internal.
func describe(err error) (code string, category runledger.Category, message, detail string) {
	if e := asError(err); e != nil {
		return string(e.Code), e.Category, e.Message, e.Detail
	}
	return "cli.internal", runledger.CategoryInternal, err.Error(), ""
}

// writeError prints err on w: one JSON object with --json, otherwise one
// line "runledger <cmd>: <message> (<code>: <detail>)".
func writeError(w io.Writer, asJSON bool, cmd string, err error) {
	code, category, message, detail := describe(err)
	if asJSON {
		writeJSON(w, errorJSON{Error: errorBody{Code: code, Category: category, Message: message}})
		return
	}
	line := "runledger: " + message
	switch {
	case cmd != "" && strings.HasPrefix(message, cmd+":"):
		line = "runledger " + message
	case cmd != "":
		line = "runledger " + cmd + ": " + message
	}
	switch {
	case strings.HasPrefix(code, "cli."):
		// The command line's own errors: the message is the whole story,
		// plus what was tried, if anything, and where to read more.
		if detail != "" {
			line += " (" + detail + ")"
		}
		if category == runledger.CategoryValidation && cmd != "" {
			line += fmt.Sprintf(" (see 'runledger help %s')", cmd)
		}
	case detail != "" && !strings.Contains(message, detail):
		line += fmt.Sprintf(" (%s: %s)", code, detail)
	default:
		line += fmt.Sprintf(" (%s)", code)
	}
	fmt.Fprintln(w, oneLine(line))
}

// oneLine folds line breaks so that an error is always one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// writeJSON prints v as one line of JSON. Payloads are printed as stored,
// without HTML escaping.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only a value this program built can get here; make it loud.
		fmt.Fprintf(w, `{"error":{"code":"cli.internal","category":"internal","message":%q}}`+"\n", "encode output: "+err.Error())
	}
}
