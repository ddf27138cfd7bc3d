package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/jobs"
)

var enqueueBulkCmd = &command{
	name:    "enqueue-bulk",
	summary: "Enqueue many jobs from JSON lines, a batch of up to 10,000 per transaction.",
	help: `Reads one enqueue request a line, as a JSON object:
  {"type","payload","org","priority","max_attempts","timeout_seconds",
   "idempotency_key","resource_key","run_at"}
All but "type" are optional and mean what the flags of 'runledger enqueue'
mean; "run_at" is an RFC 3339 time (a future one makes the job scheduled);
a line's "org" wins over --org. Blank lines are skipped (they still count
in line numbers).

The whole input is read and checked before any database work: a line that
is not a JSON object (or has an unknown field, a field of the wrong type,
an org that is not a UUID, a run_at that is not RFC 3339) exits 2 naming
its line number, and nothing is written. stdin (--from -) is copied to a
temporary file first, up to --max-input-bytes.

The lines then go in batches of up to 10,000 (fewer when their payloads
pass 16 MiB), each one transaction: every
request keeps the single enqueue's semantics and gets its own result. A
keyed request repeated gets the job it made ("existing"); the same key with
another request is a conflict; an invalid request or a type that is missing
or disabled is refused. A refused line writes nothing and does not stop the
others. Running the same input again is safe for keyed lines (they report
"existing"); unkeyed lines insert again.

Output: with --details, one line per input line first, in input order; with
--json one object each:
  {"line":N,"result":"inserted"|"existing"|"conflict"|"invalid"|
   "definition_unavailable","job_id":"..." (inserted or existing),
   "error":{"code","category","message"} (refused)}
then the summary, the last line; with --json:
  {"outcome":"enqueue_bulk","requested":N,"inserted":N,"existing":N,"refused":N}

Exit codes: 0 every line inserted or existing; 6 at least one line was
refused (the others are written); 2 usage or validation error, nothing
written; 1 other errors (batches committed before stay).`,
	setup: func(fs *flagSet) runFunc {
		from := fs.str("from", "`FILE`: the JSON lines to read; - reads stdin.")
		fs.requireFlag("from")
		org := fs.uuidFlag("org", "`UUID`: the organization (tenant) of lines without an \"org\". Default: global scope.")
		details := fs.boolean("details", false, "Also print one line per input line, before the summary (with --json: one JSON object each).")
		maxInput := maxInputBytesFlag(fs)
		return func(ctx context.Context, inv *invocation) (result, error) {
			in, err := openEnqueueLines(ctx, *from, inv.stdin, *maxInput, *org)
			if err != nil {
				return nil, err
			}
			defer in.f.Close()
			pool, err := inv.Pool(ctx)
			if err != nil {
				return nil, err
			}
			out := bufio.NewWriterSize(inv.stdout, 64<<10)
			defer out.Flush()
			sum := &enqueueBulkSummary{Outcome: "enqueue_bulk"}
			var batch []jobs.EnqueueRequest
			var lines []int
			flush := func() error {
				if len(batch) == 0 {
					return nil
				}
				res, err := jobs.EnqueueMany(ctx, pool, batch)
				if err != nil {
					return err
				}
				for i, r := range res {
					d := enqueueDetail(lines[i], r)
					sum.count(d.Result)
					if *details {
						d.write(out, inv.asJSON())
					}
				}
				batch, lines = batch[:0], lines[:0]
				return out.Flush()
			}
			held := 0 // payload bytes in batch
			err = in.each(ctx, func(line int, req jobs.EnqueueRequest) error {
				batch, lines = append(batch, req), append(lines, line)
				held += len(req.Payload)
				if len(batch) == jobs.MaxEnqueueMany || held >= maxBulkBatchBytes {
					held = 0
					return flush()
				}
				return nil
			})
			if err == nil {
				err = flush()
			}
			if err != nil {
				return nil, err
			}
			return sum, nil
		}
	},
}

// maxBulkBatchBytes ends a batch early once its payloads hold this many
// bytes, so that the memory a batch takes stays bounded (10,000 lines of
// up to 64 KiB would be 640 MiB).
const maxBulkBatchBytes = 16 << 20

// enqueueLine is one input line as decoded; a nil field was not given.
type enqueueLine struct {
	Type           *string         `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	Org            *string         `json:"org"`
	Priority       *int32          `json:"priority"`
	MaxAttempts    *int32          `json:"max_attempts"`
	TimeoutSeconds *int32          `json:"timeout_seconds"`
	IdempotencyKey *string         `json:"idempotency_key"`
	ResourceKey    *string         `json:"resource_key"`
	RunAt          *time.Time      `json:"run_at"`
}

// enqueueLines is a checked input, read again by each.
type enqueueLines struct {
	name string
	f    *os.File
	org  *uuid.UUID
}

// openEnqueueLines opens the input at path ("-": stdin) and checks every
// line, before any database work: the first bad line is a usage error
// naming it. Input that is not a regular file is spooled to a temporary
// file as it is checked (readLines bounds it). Close in.f when done.
func openEnqueueLines(ctx context.Context, path string, stdin io.Reader, maxBytes int64, org *uuid.UUID) (*enqueueLines, error) {
	l := &enqueueLines{name: path, org: org}
	var in io.Reader
	if path == "-" {
		l.name, in = "stdin", stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, invalidArgf("enqueue-bulk: cannot read --from %s: %s", path, pathErrorCause(err))
		}
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			l.f = f
		} else {
			defer f.Close()
			in = f
		}
	}
	check := func(n int, text []byte) error {
		_, _, err := l.parse(n, text)
		return err
	}
	src := inputSource{cmd: "enqueue-bulk", name: "--from " + l.name, maxBytes: maxBytes}
	if l.f == nil {
		f, err := spool(ctx, src, in, check)
		if err != nil {
			return nil, err
		}
		l.f = f
		return l, nil
	}
	src.maxBytes = 0 // a regular file is read twice in place, not held
	if _, err := readLines(ctx, src, l.f, nil, check); err != nil {
		l.f.Close()
		return nil, err
	}
	if _, err := l.f.Seek(0, io.SeekStart); err != nil {
		l.f.Close()
		return nil, invalidArgf("enqueue-bulk: cannot read --from %s: %s", l.name, pathErrorCause(err))
	}
	return l, nil
}

// parse decodes line n; skip is true for a blank line.
func (l *enqueueLines) parse(n int, text []byte) (req jobs.EnqueueRequest, skip bool, err error) {
	t := bytes.TrimSpace(text)
	if len(t) == 0 {
		return req, true, nil
	}
	bad := func(format string, args ...any) error {
		return usageErrorf("enqueue-bulk: --from %s line %d: %s", l.name, n, fmt.Sprintf(format, args...))
	}
	if t[0] != '{' {
		return req, false, bad("not a JSON object (it starts %s)", clip(string(t[:min(len(t), 60)])))
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	var v enqueueLine
	if err := dec.Decode(&v); err != nil {
		return req, false, bad("not a valid request object: %s", oneLine(err.Error()))
	}
	if dec.More() {
		return req, false, bad("more than one JSON value on the line")
	}
	req.Scope = scopeFor(l.org)
	if v.Org != nil {
		id, err := uuid.Parse(*v.Org)
		if err != nil {
			return req, false, bad("org %s is not a UUID", clip(*v.Org))
		}
		req.Scope = runledger.Organization(id)
	}
	if v.Type != nil {
		req.JobType = *v.Type
	}
	if len(v.Payload) > 0 {
		req.Payload = append(json.RawMessage(nil), v.Payload...)
	}
	req.Priority, req.MaxAttempts, req.TimeoutSeconds, req.RunAt = v.Priority, v.MaxAttempts, v.TimeoutSeconds, v.RunAt
	if v.IdempotencyKey != nil {
		if *v.IdempotencyKey == "" {
			return req, false, bad(`"idempotency_key" must not be empty (leave it out for an unkeyed enqueue)`)
		}
		req.IdempotencyKey = *v.IdempotencyKey
	}
	if v.ResourceKey != nil {
		if *v.ResourceKey == "" {
			return req, false, bad(`"resource_key" must not be empty (leave it out for none)`)
		}
		req.ExecutionResourceKey = *v.ResourceKey
	}
	return req, false, nil
}

// each calls fn with every request of the checked input, in order, with
// its line number.
func (l *enqueueLines) each(ctx context.Context, fn func(line int, req jobs.EnqueueRequest) error) error {
	src := inputSource{cmd: "enqueue-bulk", name: "--from " + l.name}
	_, err := readLines(ctx, src, l.f, nil, func(n int, text []byte) error {
		req, skip, err := l.parse(n, text)
		if err != nil || skip {
			return err
		}
		return fn(n, req)
	})
	return err
}

// enqueueBulkDetail is one --details line.
type enqueueBulkDetail struct {
	Line   int        `json:"line"`
	Result string     `json:"result"`
	JobID  *uuid.UUID `json:"job_id,omitempty"`
	Error  *errorBody `json:"error,omitempty"`
}

// enqueueDetail names the result of one line.
func enqueueDetail(line int, r jobs.EnqueueManyResult) enqueueBulkDetail {
	d := enqueueBulkDetail{Line: line}
	if r.Err == nil {
		id := r.Job.ID
		d.Result, d.JobID = string(r.Disposition), &id
		return d
	}
	code, category, message, _ := describe(r.Err)
	d.Error = &errorBody{Code: code, Category: category, Message: message}
	var e *runledger.Error
	switch {
	case errors.As(r.Err, &e) && e.Code == runledger.CodeDefinitionNotFoundOrDisabled:
		d.Result = "definition_unavailable"
	case category == runledger.CategoryConflict:
		d.Result = "conflict"
	default:
		d.Result = "invalid"
	}
	return d
}

func (d enqueueBulkDetail) write(w io.Writer, asJSON bool) {
	if asJSON {
		writeJSON(w, d)
		return
	}
	switch {
	case d.JobID != nil:
		fmt.Fprintf(w, "line %d: %s %s\n", d.Line, d.Result, d.JobID)
	default:
		fmt.Fprintf(w, "line %d: %s: %s (%s)\n", d.Line, d.Result, d.Error.Message, d.Error.Code)
	}
}

// enqueueBulkSummary is the last line of enqueue-bulk.
type enqueueBulkSummary struct {
	Outcome   string `json:"outcome"`
	Requested int    `json:"requested"`
	Inserted  int    `json:"inserted"`
	Existing  int    `json:"existing"`
	Refused   int    `json:"refused"`
}

func (s *enqueueBulkSummary) count(result string) {
	s.Requested++
	switch result {
	case string(runledger.DispositionInserted):
		s.Inserted++
	case string(runledger.DispositionExisting):
		s.Existing++
	default:
		s.Refused++
	}
}

func (s *enqueueBulkSummary) text(w io.Writer) {
	fmt.Fprintf(w, "Requested %d: %d inserted, %d existing, %d refused.\n", s.Requested, s.Inserted, s.Existing, s.Refused)
}

func (s *enqueueBulkSummary) exitCode() int {
	if s.Refused > 0 {
		return exitRefused
	}
	return exitOK
}
