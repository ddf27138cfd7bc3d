package runledger

// MaxKeyBytes is the longest key the ledger accepts, in bytes of UTF-8:
// an idempotency key, a replay request key or an execution resource key.
// Exactly 512 bytes is valid; the tables' CHECK constraints enforce the
// same bound.
const MaxKeyBytes = 512
