package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runledger-go/runledger/lease"
)

// errNoJob is returned by SetProgress and SetCheckpoint outside a handler.
var errNoJob = errors.New("worker: the context is not a handler's")

type execKey struct{}

func executionOf(ctx context.Context) *execution {
	e, _ := ctx.Value(execKey{}).(*execution)
	return e
}

// SetProgress records the running job's progress (done of total; both
// non-negative, done at most total). It is written with the next heartbeat,
// which writes one PROGRESS event when it changed, and with the attempt's
// completion or failure. It fails outside a handler's context.
func SetProgress(ctx context.Context, done, total int64) error {
	e := executionOf(ctx)
	if e == nil {
		return errNoJob
	}
	if done < 0 || total < 0 || done > total {
		return fmt.Errorf("worker: progress %d of %d: both must be non-negative, done at most total", done, total)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.progressDone, e.progressTotal = &done, &total
	e.dirty = true
	e.version++
	return nil
}

// SetCheckpoint records v (encoded as JSON, at most
// runledger.DefaultMaxJSONBytes) as the running job's checkpoint, written with
// the next heartbeat, or with the attempt's failure when it fails first. A later attempt of the same run finds it in
// Job.Record.Checkpoint and can resume from it. It fails outside a
// handler's context, and for a value that does not encode or is too large.
func SetCheckpoint(ctx context.Context, v any) error {
	e := executionOf(ctx)
	if e == nil {
		return errNoJob
	}
	b, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return fmt.Errorf("worker: encode the checkpoint: %w", err)
		}
	}
	if err := (lease.HeartbeatRequest{WorkerID: "w", Lease: time.Second, Checkpoint: b}).Validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.checkpoint = b
	e.dirty = true
	e.version++
	return nil
}
