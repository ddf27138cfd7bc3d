// Package failpoint lets tests act at named points inside an operation (kill
// a connection between two statements, change a row between a locking read
// and the read that follows it). Outside tests no hook is registered and
// Inject costs one atomic load.
package failpoint

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
)

// Hook runs at a failpoint with the operation's context and a value that
// identifies the call (for replay, its replay.Request).
type Hook func(ctx context.Context, arg any)

var (
	mu     sync.Mutex
	active atomic.Pointer[map[string]Hook]
)

// Inject runs the hook registered for name, if any.
func Inject(ctx context.Context, name string, arg any) {
	m := active.Load()
	if m == nil {
		return
	}
	if h := (*m)[name]; h != nil {
		h(ctx, arg)
	}
}

// Enable registers hook at name, replacing any hook there, and returns a
// function that removes it. Hooks are process-wide: a test that enables one
// must not run in parallel with other tests reaching the same point, or its
// hook must ignore calls whose arg is not its own.
func Enable(name string, hook Hook) (disable func()) {
	mu.Lock()
	defer mu.Unlock()
	next := map[string]Hook{}
	if m := active.Load(); m != nil {
		for k, v := range *m {
			next[k] = v
		}
	}
	next[name] = hook
	active.Store(&next)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		next := map[string]Hook{}
		if m := active.Load(); m != nil {
			for k, v := range *m {
				next[k] = v
			}
		}
		delete(next, name)
		if len(next) == 0 {
			active.Store(nil)
			return
		}
		active.Store(&next)
	}
}

// Failpoints of package replay. Each receives a ReplayCall.
//
// Replay sends its statements in batches (one round trip each): in
// SucceededJob [BEGIN + lookup], [source lock + second lookup +
// classification read], [insert + COMMIT]; in SucceededJobTx the same
// without BEGIN and COMMIT. A failpoint between two statements of one
// batch fires where the client last acts before them, as noted.
const (
	// ReplayAfterLookup: the first lineage lookup found nothing.
	ReplayAfterLookup = "replay/after-lookup"
	// ReplayBeforeSourceLock: before each locking read of the source (before
	// each attempt's batch).
	ReplayBeforeSourceLock = "replay/before-source-lock"
	// ReplayAfterLockMiss: a locking read found nothing. The classification
	// read travelled in the same batch; when it saw the source SUCCEEDED at
	// the expected run but workflow-managed (the one verdict that ends in
	// an error), it is read again in a statement of its own after this
	// point, and that read decides.
	ReplayAfterLockMiss = "replay/after-lock-miss"
	// ReplayAfterSourceLock: the source is locked and the second lookup
	// found nothing; the insert is next.
	ReplayAfterSourceLock = "replay/after-source-lock"
	// ReplayAfterInsert: the replay, its event and lineage are written in
	// the open transaction (SucceededJobTx). In SucceededJob the insert and
	// COMMIT travel in one batch, and this point fires just before that
	// batch is sent, followed by TxnBeforeCommit.
	ReplayAfterInsert = "replay/after-insert"
)

// Failpoints of owned transactions (internal/txn, and replay.SucceededJob,
// which runs its transaction by hand). Each receives a TxnCall.
const (
	// TxnAfterBegin: the transaction has begun; the operation is next. In
	// replay.SucceededJob BEGIN travels with the first lookup, and this
	// point fires once that batch has returned.
	TxnAfterBegin = "txn/after-begin"
	// TxnBeforeCommit: the operation succeeded; COMMIT is next. In
	// replay.SucceededJob's insert path COMMIT travels with the insert,
	// and this point fires just before that batch is sent.
	TxnBeforeCommit = "txn/before-commit"
)

// ReplayCall identifies a replay request at a failpoint. Attempt is the lock
// loop's attempt (from 1) at the lock-loop points and 0 elsewhere.
type ReplayCall struct {
	SourceJobID uuid.UUID
	Key         string
	Attempt     int
}

// TxnCall identifies an owned transaction at a failpoint by its operation
// name ("successful job replay", "job enqueue", ...).
type TxnCall struct {
	Op string
}
