package replay

import (
	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/failpoint"
)

// Failpoints of this package (see internal/failpoint), each fired with a
// failpointCall; the owned transaction also fires internal/txn's. An
// attempt's statements share one round trip; while a test enables one of
// these points the batch is split there (txn.Batch.PointIf), so the hook
// runs between the two statements, only when its condition holds.
const (
	// fpAfterLookup: the first lineage lookup found nothing (first
	// attempt); the source lock is next.
	fpAfterLookup = "replay/after-lookup"
	// fpBeforeSourceLock: the lookup of an attempt found nothing; the
	// source lock is next.
	fpBeforeSourceLock = "replay/before-source-lock"
	// fpAfterLockMiss: the lookup and the locking read of an attempt both
	// found nothing; the second lookup, the classification read and the
	// insert are next.
	fpAfterLockMiss = "replay/after-lock-miss"
	// fpAfterClassification: the locking read found nothing, the second
	// lookup found no lineage, and the classification read has run; the
	// insert, which re-checks the source and locks it itself, is next.
	// When the classification saw the source SUCCEEDED at the expected run
	// but workflow-managed (the one verdict that ends in an error), it is
	// read again in a statement of its own after the batch, and that read
	// decides.
	fpAfterClassification = "replay/after-classification"
	// fpAfterSourceLock: the source is locked and the second lookup found
	// nothing; the insert is next.
	fpAfterSourceLock = "replay/after-source-lock"
	// fpAfterInsert: the replay, its event and lineage are written; in
	// SucceededJob COMMIT is next (then txn's before-commit point).
	fpAfterInsert = "replay/after-insert"
	// fpBulkAfterLock: a bulk chunk's lookup and lock round trip is in:
	// the eligible sources without lineage are locked, nothing is written
	// yet (fired with the engine's bulk.FailpointCall, labelled with the
	// request key). The engine's own points (internal/bulk) mark a
	// filter's page selected and a chunk reported.
	fpBulkAfterLock = "replay/bulk-after-lock"
)

func init() {
	failpoint.Declare(fpAfterLookup, fpBeforeSourceLock, fpAfterLockMiss, fpAfterClassification, fpAfterSourceLock, fpAfterInsert,
		fpBulkAfterLock)
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
