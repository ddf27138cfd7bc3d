package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

// writeSources writes n "UUID 1" lines of fresh random ids to a file and
// returns its path; line(i) may replace the line of source i (from 0).
func writeSources(t testing.TB, n int, line func(i int, id uuid.UUID) string) (string, []uuid.UUID) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sources.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	ids := make([]uuid.UUID, 0, min(n, 1<<16))
	for i := range n {
		id := uuid.New()
		if len(ids) < cap(ids) {
			ids = append(ids, id)
		}
		s := id.String() + " 1"
		if line != nil {
			s = line(i, id)
		}
		fmt.Fprintln(w, s)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, ids
}

// peakHeap runs fn and returns the most heap memory in use by objects
// (live or not yet swept) seen while it ran, above what was in use before,
// sampling every millisecond.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond) // sampling, not synchronisation
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(done)
	wg.Wait()
	peak = max(peak, read())
	if peak < base {
		return 0
	}
	return peak - base
}

// TestReplayBulkListIsCheckedAndStreamedInBoundedMemory checks and then
// reads a --from list of 1,000,000 sources (38 MB) as replay-bulk does:
// the heap in use never grows by more than 16 MB, where holding the list
// and a map of its ids takes several times that. Then a list of 20,000
// sources goes through the action on a real server, streamed.
func TestReplayBulkListIsCheckedAndStreamedInBoundedMemory(t *testing.T) {
	const n, bound = 1_000_000, 16 << 20
	path, ids := writeSources(t, n, nil)
	var list *sourceList[replay.Source]
	var read int
	var err error
	peak := peakHeap(func() {
		list, err = openSourceList(context.Background(), replaySources, path, nil, defaultMaxInputBytes)
		if err != nil {
			return
		}
		for src, err := range list.All() {
			if err != nil {
				t.Error(err)
				return
			}
			if read < len(ids) && src.JobID != ids[read] {
				t.Errorf("source %d is %s, want %s", read, src.JobID, ids[read])
				return
			}
			read++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	list.Close()
	if list.Len() != n || read != n {
		t.Fatalf("checked %d sources, read %d, want %d", list.Len(), read, n)
	}
	t.Logf("checking and reading %d sources: heap in use peaked %.1f MB above the start", n, float64(peak)/(1<<20))
	if peak > bound {
		t.Fatalf("checking and reading %d sources took %.1f MB of heap, want at most %d MB", n, float64(peak)/(1<<20), bound>>20)
	}

	// Through the action, on a real server: none of the sources exists.
	url := testdb.NewURL(t)
	small, _ := writeSources(t, 20_000, nil)
	var stdout, stderr syncBuffer
	peak = peakHeap(func() {
		if code := runIn(testdb.Context(t), url, &stdout, &stderr, "replay-bulk", "--from", small, "--key", "k", "--reason", "r", "--json"); code != exitRefused {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	})
	if want := bulkSummaryLine(false, 20_000, 0, 0, 0, 0, 20_000, 0, 0) + "\n"; stdout.String() != want {
		t.Fatalf("stdout %s, want %s", stdout.String(), want)
	}
	t.Logf("replay-bulk over 20,000 listed sources: heap in use peaked %.1f MB above the start", float64(peak)/(1<<20))
	if peak > bound {
		t.Fatalf("replay-bulk over 20,000 listed sources took %.1f MB of heap", float64(peak)/(1<<20))
	}
}

// TestSourceListNamesTheFirstDuplicate hides two duplicates deep in a list
// of 200,000 sources: the check names the first line that repeats a job,
// and the line it repeats.
func TestSourceListNamesTheFirstDuplicate(t *testing.T) {
	t.Parallel()
	var first, second uuid.UUID
	path, _ := writeSources(t, 200_000, func(i int, id uuid.UUID) string {
		switch i {
		case 9:
			first = id
		case 4:
			second = id
		case 150_000:
			return second.String() + " 2"
		case 120_000:
			return "  " + first.String() + "\t1"
		}
		return id.String() + " 1"
	})
	_, err := openSourceList(context.Background(), replaySources, path, nil, defaultMaxInputBytes)
	e := asError(err)
	if e == nil || e.Code != codeBulkDuplicate || !strings.Contains(e.Message, "line 120001: duplicate source: job "+first.String()+" is already on line 10") {
		t.Fatalf("error %v, want the duplicate on line 120001 of line 10", err)
	}
}

// TestSourceListFromStdinAndChangedFiles reads a list from stdin (copied
// to a temporary file, read twice), and reports a file that changed after
// it was checked instead of reading sources it never checked.
func TestSourceListFromStdinAndChangedFiles(t *testing.T) {
	t.Parallel()
	a, b := uuid.New(), uuid.New()
	list, err := openSourceList(context.Background(), replaySources, "-", strings.NewReader("# two\n"+a.String()+" 1\r\n\n"+b.String()+" 3\n"), defaultMaxInputBytes)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var got []string
		for src, err := range list.All() {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprint(src.JobID, " ", src.ExpectedRunNumber))
		}
		if strings.Join(got, ",") != a.String()+" 1,"+b.String()+" 3" || list.Len() != 2 {
			t.Fatalf("stdin list read as %v (%d)", got, list.Len())
		}
	}
	list.Close()

	for _, tc := range []struct {
		name, now string
	}{
		{"grown", a.String() + " 1\n" + b.String() + " 1\n" + uuid.NewString() + " 1\n"},
		{"shrunk", a.String() + " 1\n"},
		{"broken", a.String() + " 1\nnot a source\n"},
	} {
		path := writeList(t, a.String()+" 1", b.String()+" 1")
		list, err := openSourceList(context.Background(), replaySources, path, nil, defaultMaxInputBytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(tc.now), 0o644); err != nil {
			t.Fatal(err)
		}
		var last error
		n := 0
		for _, err := range list.All() {
			if err != nil {
				last = err
				break
			}
			n++
		}
		list.Close()
		if e := asError(last); e == nil || e.Code != "cli.input_changed" || !strings.Contains(e.Message, "changed while the action ran") || n > 2 {
			t.Errorf("%s: read %d sources, then %v; want cli.input_changed", tc.name, n, last)
		}
		if runledger.CategoryOf(last) == runledger.CategoryValidation {
			t.Errorf("%s: a list changed mid-action is a validation error (exit 2, which says nothing was written)", tc.name)
		}
	}
	if _, err := openSourceList(context.Background(), replaySources, "-", errReader{}, defaultMaxInputBytes); asError(err) == nil || !strings.Contains(asError(err).Message, "cannot read --from stdin: broken pipe") {
		t.Fatalf("an unreadable stdin: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("broken pipe") }
