package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// Reading a command's input (--from FILE or stdin) as a bounded stream,
// for every command that takes one: each line is checked as it is read,
// and the first bad line stops the reading (nothing more is read, nothing
// is written); a line is at most maxInputLine bytes; stdin is spooled to a
// temporary file (so that it can be read again) up to a ceiling the user
// sets with --max-input-bytes; and SIGINT or SIGTERM (the command's
// context) stops the reading at once, even while the input is silent.

// maxInputLine is the longest input line accepted, in bytes.
const maxInputLine = 64 << 10

// maxInputFlag is the flag that sets the ceiling on what stdin may hold.
const maxInputFlag = "max-input-bytes"

// defaultMaxInputBytes is --max-input-bytes when not given: 64 MiB, about
// 1.6 million sources of replay-bulk.
const defaultMaxInputBytes = 64 << 20

// Codes of the input reader's refusals (exit 2) and of an interrupt.
const (
	// codeInputTooLarge: stdin holds more than --max-input-bytes.
	codeInputTooLarge runledger.Code = "cli.input_too_large"
	// codeInputLineTooLong: a line over maxInputLine bytes.
	codeInputLineTooLong runledger.Code = "cli.input_line_too_long"
	codeInterrupted      runledger.Code = "cli.interrupted"
)

// inputSource names an input for messages and bounds it.
type inputSource struct {
	// cmd starts the messages ("replay-bulk"); name is how they call the
	// input ("--from stdin", "--from list.txt").
	cmd, name string
	// maxBytes bounds the spool (stdin); 0 is no bound.
	maxBytes int64
}

// maxInputBytesFlag defines --max-input-bytes on fs.
func maxInputBytesFlag(fs *flagSet) *int64 {
	p := new(int64)
	*p = defaultMaxInputBytes
	fs.define(&byteSizeValue{p: p}, maxInputFlag, "`SIZE`: the most stdin (--from -) may hold, in bytes or with a unit (64MiB, 512KiB, 1GiB); more is refused before anything is written. Default: 64MiB.")
	return p
}

// byteSizeValue is a flag holding a positive byte count: digits,
// optionally followed by B, KiB, MiB or GiB (K, M, G alike).
type byteSizeValue struct{ p *int64 }

func (v *byteSizeValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return strconv.FormatInt(*v.p, 10)
}

func (v *byteSizeValue) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

// parseByteSize parses "1048576", "64MiB", "64M", "512KiB", "1GiB".
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 1 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("want a positive size in bytes (such as 67108864 or 64MiB), got %s", clip(s))
	}
	return n << shift, nil
}

// readLines reads r a line at a time until its end, calling check with
// each line's number (from 1) and text (without its line break; only
// valid until check returns), and copying what it read to spool when
// spool is not nil. It stops at check's first error (returned as is), at
// a line over maxInputLine bytes or input over in.maxBytes (validation
// errors naming the line or the flag), at a read error, or when ctx ends
// (cli.interrupted: nothing was written). It returns the number of lines
// read.
func readLines(ctx context.Context, in inputSource, r io.Reader, spool io.Writer, check func(line int, text []byte) error) (int, error) {
	// The buffer holds the longest line accepted and its line break, so
	// that a fuller buffer is a line too long.
	br := bufio.NewReaderSize(interruptible(ctx, r), maxInputLine+2)
	var total int64
	n := 0
	for {
		chunk, err := br.ReadSlice('\n')
		total += int64(len(chunk))
		if in.maxBytes > 0 && total > in.maxBytes {
			return n, errs.Validation(codeInputTooLarge, fmt.Sprintf(
				"%s: %s holds more than %d bytes, the ceiling of --%s; nothing was written (raise --%s, or split the input)",
				in.cmd, in.name, in.maxBytes, maxInputFlag, maxInputFlag)).New("")
		}
		text := bytes.TrimSuffix(bytes.TrimSuffix(chunk, []byte("\n")), []byte("\r"))
		if errors.Is(err, bufio.ErrBufferFull) || len(text) > maxInputLine {
			return n + 1, errs.Validation(codeInputLineTooLong, fmt.Sprintf(
				"%s: %s line %d: line longer than %d bytes (it starts %s)", in.cmd, in.name, n+1, maxInputLine, clip(string(text[:60])))).New("")
		}
		if spool != nil && len(chunk) > 0 {
			if _, werr := spool.Write(chunk); werr != nil {
				return n, invalidArgf("%s: cannot spool %s: %s", in.cmd, in.name, pathErrorCause(werr))
			}
		}
		if len(chunk) > 0 {
			n++
			if cerr := check(n, text); cerr != nil {
				return n, cerr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return n, nil
		case errors.Is(err, errReadInterrupted):
			return n, &runledger.Error{Code: codeInterrupted, Category: runledger.CategoryInternal,
				Message: fmt.Sprintf("%s: interrupted while reading %s; nothing was written", in.cmd, in.name), Err: ctx.Err()}
		default:
			return n, invalidArgf("%s: cannot read %s: %s", in.cmd, in.name, pathErrorCause(err))
		}
	}
}

// errReadInterrupted ends a read when the context ends.
var errReadInterrupted = errors.New("interrupted")

// interruptible returns a reader of r whose Read returns errReadInterrupted as
// soon as ctx ends, even while r blocks (a silent pipe): r is read by a
// goroutine, which ends with r's next Read when the command is
// interrupted (the process exits anyway).
func interruptible(ctx context.Context, r io.Reader) io.Reader {
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			return &ctxFileReader{ctx: ctx, r: r} // a regular file never blocks
		}
	}
	return &ctxReader{ctx: ctx, r: r, results: make(chan readResult), asks: make(chan []byte)}
}

type ctxFileReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxFileReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, errReadInterrupted
	}
	return c.r.Read(p)
}

type readResult struct {
	n   int
	err error
}

type ctxReader struct {
	ctx     context.Context
	r       io.Reader
	started bool
	asks    chan []byte
	results chan readResult
	pending bool // a read was asked for and has not answered
	buf     []byte
	err     error // the error that ended the reading goroutine, returned again
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if !c.started {
		c.started = true
		go c.loop()
	}
	if !c.pending {
		if len(c.buf) < len(p) {
			c.buf = make([]byte, len(p))
		}
		select {
		case c.asks <- c.buf[:len(p)]:
			c.pending = true
		case <-c.ctx.Done():
			return 0, errReadInterrupted
		}
	}
	select {
	case res := <-c.results:
		c.pending = false
		c.err = res.err
		copy(p, c.buf[:res.n])
		return res.n, res.err
	case <-c.ctx.Done():
		return 0, errReadInterrupted
	}
}

// loop reads for Read into the buffer Read hands it, so that an
// abandoned read never writes into the caller's slice.
func (c *ctxReader) loop() {
	for {
		var buf []byte
		select {
		case buf = <-c.asks:
		case <-c.ctx.Done():
			return
		}
		n, err := c.r.Read(buf)
		select {
		case c.results <- readResult{n, err}:
		case <-c.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Type names the kind of value in pflag's terms.
func (v *byteSizeValue) Type() string { return "size" }
