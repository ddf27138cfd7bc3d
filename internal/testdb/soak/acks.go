package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// Kinds of acknowledgement: what a client was told, which the final check
// holds the ledger to.
const (
	ackEnqueued  = "enqueued"  // an enqueue returned this job (inserted or existing)
	ackReplay    = "replay"    // a replay returned this replay job for (source, run 1, key)
	ackCompleted = "completed" // a completion of this job succeeded
	ackDead      = "dead"      // a failure dead-lettered this job
)

// ack is one line of the log.
type ack struct {
	kind   string
	job    uuid.UUID
	source uuid.UUID // replay only
	key    string    // replay only
}

// ackLog appends acknowledgements to a temp file, so that the record of
// everything the clients were told does not grow the process's memory.
type ackLog struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	counts map[string]int64
	err    error
}

func newAckLog() (*ackLog, error) {
	f, err := os.CreateTemp("", "runledger-soak-acks-*.csv")
	if err != nil {
		return nil, fmt.Errorf("acknowledgement log: %w", err)
	}
	return &ackLog{f: f, w: bufio.NewWriterSize(f, 64<<10), counts: map[string]int64{}}, nil
}

// add appends one acknowledgement. Keys hold no commas (the clients make
// them).
func (l *ackLog) add(a ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[a.kind]++
	if l.err != nil {
		return
	}
	src := ""
	if a.source != uuid.Nil {
		src = a.source.String()
	}
	_, l.err = fmt.Fprintf(l.w, "%s,%s,%s,%s\n", a.kind, a.job, src, a.key)
}

// close flushes the log; it can then be read with each.
func (l *ackLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = l.w.Flush()
	}
	if err := l.f.Close(); l.err == nil {
		l.err = err
	}
	return l.err
}

// each calls fn for every acknowledgement in the order written.
func (l *ackLog) each(fn func(ack) error) error {
	f, err := os.Open(l.f.Name())
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ",", 4)
		if len(parts) != 4 {
			return fmt.Errorf("acknowledgement log: bad line %q", sc.Text())
		}
		a := ack{kind: parts[0], key: parts[3]}
		if a.job, err = uuid.Parse(parts[1]); err != nil {
			return fmt.Errorf("acknowledgement log: %q: %w", sc.Text(), err)
		}
		if parts[2] != "" {
			if a.source, err = uuid.Parse(parts[2]); err != nil {
				return fmt.Errorf("acknowledgement log: %q: %w", sc.Text(), err)
			}
		}
		if err := fn(a); err != nil {
			return err
		}
	}
	return sc.Err()
}

// remove deletes the file.
func (l *ackLog) remove() { _ = os.Remove(l.f.Name()) }
