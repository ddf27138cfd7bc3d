package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"iter"
	"math/bits"
	"os"
	"strings"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// A bulk command's --from list, checked whole before any database work
// and then streamed to the library a chunk at a time, in memory that does
// not hold the list:
//
//  1. stdin is copied to a temporary file (removed at once, so it goes
//     away with the process), so that the list can be read again, each
//     line checked as it is copied (input.go: the first bad line, a line
//     too long, more than --max-input-bytes or an interrupt stop it);
//  2. a first pass checks every line's syntax and feeds each job id to a
//     Bloom filter (about 10 bits per possible source, sized from the
//     input's length); an id the filter may have seen is a candidate, kept
//     in an exact set (at most 1% of the sources are false candidates);
//  3. when there are candidates, a second pass over the candidates only
//     finds the first line that repeats a job, exactly;
//  4. the action reads the list a third time, as it goes.
//
// So the check holds about 1.25 bytes per source of Bloom filter (10 bits
// per 35 bytes of input, the shortest source line) plus some 40 bytes per
// candidate, and the action a chunk; see docs/CLI.md ("Bulk replay").

// Bloom filter of the duplicate check: bloomBitsPerSource bits per
// possible source and bloomHashes probes give about 0.8% false
// candidates.
const (
	bloomBitsPerSource = 10
	bloomHashes        = 7
)

// listSyntax describes one bulk command's --from lines.
type listSyntax[S any] struct {
	// cmd starts the messages ("replay-bulk").
	cmd string
	// minLine is the shortest valid source line in bytes, newline
	// included: it bounds the number of sources by the input's size.
	minLine int64
	// parse reads the fields of a non-blank, non-comment line; problem is
	// "" when the line is a source, else what is wrong with it.
	parse func(fields []string) (src S, id uuid.UUID, problem string)
	// duplicate and empty are the validation codes of a job listed twice
	// and of a list without sources; once says why a job is listed once.
	duplicate, empty runledger.Code
	once             string
}

// sourceList is a checked --from list, read again by All.
type sourceList[S any] struct {
	syntax  listSyntax[S]
	name    string // how messages call the input: the path, or "stdin"
	f       *os.File
	sources int
}

// openSourceList opens and checks the list at path ("-": stdin). Every
// error is a validation error (exit 2) naming the line, found before any
// database work: the first malformed line, else the first line naming a
// job an earlier line named, else an empty list. stdin (and any input
// that is not a regular file, such as a pipe) is read as a bounded stream
// (see readLines): checked as it is spooled, refused at its first bad
// line or beyond maxBytes, and given up when ctx ends. Close the list
// when done.
func openSourceList[S any](ctx context.Context, syn listSyntax[S], path string, stdin io.Reader, maxBytes int64) (*sourceList[S], error) {
	l := &sourceList[S]{syntax: syn, name: path}
	var in io.Reader
	if path == "-" {
		l.name = "stdin"
		in = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, invalidArgf("%s: cannot read --from %s: %s", syn.cmd, path, pathErrorCause(err))
		}
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			l.f = f
		} else {
			defer f.Close()
			in = f
		}
	}
	if l.f == nil {
		f, err := spool(ctx, inputSource{cmd: syn.cmd, name: "--from " + l.name, maxBytes: maxBytes}, in, func(n int, text []byte) error {
			if _, _, err := syn.line(l.name, n, text); err != nil && err != errSkip {
				return err
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		l.f = f
	}
	if err := l.check(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// spool copies r to a temporary file, removed at once, checking each line
// with check as it goes (see readLines), and returns the file positioned
// at its start.
func spool(ctx context.Context, in inputSource, r io.Reader, check func(int, []byte) error) (*os.File, error) {
	f, err := os.CreateTemp("", "runledger-from-*")
	if err != nil {
		return nil, invalidArgf("%s: cannot read %s: %s", in.cmd, in.name, pathErrorCause(err))
	}
	_ = os.Remove(f.Name()) // the open file stays readable; nothing is left behind
	w := bufio.NewWriterSize(f, 64<<10)
	if _, err := readLines(ctx, in, r, w, check); err != nil {
		f.Close()
		return nil, err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return nil, invalidArgf("%s: cannot spool %s: %s", in.cmd, in.name, pathErrorCause(err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, invalidArgf("%s: cannot spool %s: %s", in.cmd, in.name, pathErrorCause(err))
	}
	return f, nil
}

// line checks one line of the list: blank and comment lines yield ok
// false and no error; a malformed one a validation error naming it.
func (syn listSyntax[S]) line(name string, n int, text []byte) (src S, id uuid.UUID, err error) {
	line := strings.TrimSpace(string(text))
	if line == "" || strings.HasPrefix(line, "#") {
		return src, id, errSkip
	}
	src, id, problem := syn.parse(strings.Fields(line))
	if problem != "" {
		return src, id, invalidArgf("%s: --from %s line %d: %s", syn.cmd, name, n, problem)
	}
	return src, id, nil
}

// errSkip marks a blank or comment line.
var errSkip = errors.New("skip")

// Len is the number of sources the list holds.
func (l *sourceList[S]) Len() int { return l.sources }

// Close closes the list's file.
func (l *sourceList[S]) Close() { _ = l.f.Close() }

// check runs the checking passes and counts the sources.
func (l *sourceList[S]) check() error {
	st, err := l.f.Stat()
	if err != nil {
		return invalidArgf("%s: cannot read --from %s: %s", l.syntax.cmd, l.name, pathErrorCause(err))
	}
	filter := newBloom(int(st.Size()/l.syntax.minLine) + 1)
	// Up to about 5 times the expected false candidates: only true
	// duplicates fill the set beyond that, and the first of them is
	// among the first candidates.
	limit := max(1<<16, filter.sources/20)
	candidates := map[uuid.UUID]int{}
	full := false
	lines, err := l.scan(func(line int, _ S, id uuid.UUID) error {
		l.sources++
		if filter.add(id) && !full {
			candidates[id] = 0
			full = len(candidates) >= limit
		}
		return nil
	})
	if err != nil {
		return err
	}
	if l.sources == 0 {
		if lines == 0 {
			return bulkInvalid(l.syntax.empty, "%s: --from %s is empty: it lists no sources", l.syntax.cmd, l.name)
		}
		return bulkInvalid(l.syntax.empty, "%s: --from %s is empty: its %s are blank or comments, it lists no sources", l.syntax.cmd, l.name, plural(lines, "line"))
	}
	if len(candidates) > 0 {
		_, err = l.scan(func(line int, _ S, id uuid.UUID) error {
			first, ok := candidates[id]
			switch {
			case !ok:
			case first == 0:
				candidates[id] = line
			default:
				return bulkInvalid(l.syntax.duplicate, "%s: --from %s line %d: duplicate source: job %s is already on line %d (%s)",
					l.syntax.cmd, l.name, line, id, first, l.syntax.once)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if full {
			// Beyond belief unless the input has duplicates, which the pass
			// above then found: refuse rather than let one through.
			return invalidArgf("%s: --from %s: the duplicate check could not decide within its memory bound; split the list", l.syntax.cmd, l.name)
		}
	}
	return nil
}

// All yields the list's sources, reading it again from the start, a line
// at a time. A line that no longer parses, or a different number of
// sources, means the file changed since it was checked: All yields an
// error and stops.
func (l *sourceList[S]) All() iter.Seq2[S, error] {
	return func(yield func(S, error) bool) {
		var zero S
		n := 0
		stopped := errors.New("stopped")
		_, err := l.scan(func(_ int, src S, _ uuid.UUID) error {
			n++
			if n > l.sources || !yield(src, nil) {
				return stopped
			}
			return nil
		})
		switch {
		case errors.Is(err, stopped) && n <= l.sources:
			return
		case err == nil && n == l.sources:
			return
		case n > l.sources:
			err = inputChanged("%s: --from %s changed while the action ran: it lists more than the %d sources it listed when checked", l.syntax.cmd, l.name, l.sources)
		case err == nil:
			err = inputChanged("%s: --from %s changed while the action ran: it lists %d sources, it listed %d when checked", l.syntax.cmd, l.name, n, l.sources)
		default:
			_, _, msg, _ := describe(err)
			err = inputChanged("%s: --from %s changed while the action ran: %s", l.syntax.cmd, l.name, msg)
		}
		yield(zero, err)
	}
}

// scan reads the list from its start and calls fn with each source line's
// number and source, stopping at fn's error, at the first malformed line
// or at a read error (each returned as the command's error). It returns
// the number of lines read.
func (l *sourceList[S]) scan(fn func(line int, src S, id uuid.UUID) error) (int, error) {
	if _, err := l.f.Seek(0, io.SeekStart); err != nil {
		return 0, invalidArgf("%s: cannot read --from %s: %s", l.syntax.cmd, l.name, pathErrorCause(err))
	}
	sc := bufio.NewScanner(l.f)
	sc.Buffer(make([]byte, 0, 4096), maxInputLine+2)
	n := 0
	for sc.Scan() {
		n++
		src, id, err := l.syntax.line(l.name, n, sc.Bytes())
		if err == errSkip {
			continue
		}
		if err != nil {
			return n, err
		}
		if err := fn(n, src, id); err != nil {
			return n, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return n + 1, errs.Validation(codeInputLineTooLong, fmt.Sprintf("%s: --from %s line %d: line longer than %d bytes", l.syntax.cmd, l.name, n+1, maxInputLine)).New("")
		}
		return n, invalidArgf("%s: cannot read --from %s: %s", l.syntax.cmd, l.name, pathErrorCause(err))
	}
	return n, nil
}

// bloom is a Bloom filter of job ids: add reports whether an id may have
// been added before (always, when it was; rarely, when it was not).
type bloom struct {
	words   []uint64
	m       uint64 // bits
	sources int    // sized for
	s1, s2  maphash.Seed
}

func newBloom(sources int) *bloom {
	m := uint64(sources) * bloomBitsPerSource
	return &bloom{words: make([]uint64, (m+63)/64), m: m, sources: sources, s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// add sets id's bits and reports whether all were set already.
func (b *bloom) add(id uuid.UUID) bool {
	h1 := maphash.Bytes(b.s1, id[:])
	h2 := maphash.Bytes(b.s2, id[:]) | 1
	seen := true
	for i := range uint64(bloomHashes) {
		bit, _ := bits.Mul64(h1+i*h2, b.m) // uniform in [0, m)
		w, mask := bit/64, uint64(1)<<(bit%64)
		if b.words[w]&mask == 0 {
			seen = false
			b.words[w] |= mask
		}
	}
	return seen
}

// inputChanged is the error of a --from list that changed after it was
// checked (exit 1: chunks may have been committed).
func inputChanged(format string, args ...any) error {
	return errs.Internal("cli.input_changed", fmt.Sprintf(format, args...)).New("")
}

// bulkInvalid returns a validation error (exit 2) with code.
func bulkInvalid(code runledger.Code, format string, args ...any) error {
	return errs.Validation(code, fmt.Sprintf(format, args...)).New("")
}
