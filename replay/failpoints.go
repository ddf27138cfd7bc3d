package replay

import (
	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/failpoint"
)

// Failpoints of this package (see internal/failpoint), each fired with a
// failpointCall; the owned transaction also fires internal/txn's.
//
// The statements go in batches (one round trip each): in SucceededJob
// [BEGIN + lookup], [source lock + second lookup + classification read],
// [insert + COMMIT]; in SucceededJobTx the same without BEGIN and COMMIT.
// A failpoint between two statements of one batch fires where the client
// last acts before them, as noted.
const (
	// fpAfterLookup: the first lineage lookup found nothing.
	fpAfterLookup = "replay/after-lookup"
	// fpBeforeSourceLock: before each locking read of the source (before
	// each attempt's batch).
	fpBeforeSourceLock = "replay/before-source-lock"
	// fpAfterLockMiss: a locking read found nothing. The classification
	// read travelled in the same batch; when it saw the source SUCCEEDED at
	// the expected run but workflow-managed (the one verdict that ends in
	// an error), it is read again in a statement of its own after this
	// point, and that read decides.
	fpAfterLockMiss = "replay/after-lock-miss"
	// fpAfterSourceLock: the source is locked and the second lookup found
	// nothing; the insert is next.
	fpAfterSourceLock = "replay/after-source-lock"
	// fpAfterInsert: the replay, its event and lineage are written in the
	// open transaction (SucceededJobTx). In SucceededJob the insert and
	// COMMIT travel in one batch, and this point fires just before that
	// batch is sent, followed by txn.FailpointBeforeCommit.
	fpAfterInsert = "replay/after-insert"
)

func init() {
	failpoint.Declare(fpAfterLookup, fpBeforeSourceLock, fpAfterLockMiss, fpAfterSourceLock, fpAfterInsert)
}

// failpointCall identifies a replay request at a failpoint. Attempt is the
// lock loop's attempt (from 1) at the lock-loop points and 0 elsewhere.
type failpointCall struct {
	SourceJobID uuid.UUID
	Key         string
	Attempt     int
}

func call(req Request, attempt int) failpointCall {
	return failpointCall{SourceJobID: req.SourceJobID, Key: req.Key, Attempt: attempt}
}
