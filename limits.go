package runledger

// Limits the job operations share: a job type's length, the size of a
// job's JSON, and the largest page or batch.
const (
	// MaxJobTypeBytes is the longest job type, in bytes of UTF-8; exactly
	// 255 bytes is valid. It keeps every index that holds a job type (the
	// keyed-enqueue index holds it beside a 512-byte key) well within
	// PostgreSQL's limit on an index row.
	MaxJobTypeBytes = 255
	// DefaultMaxJSONBytes is the limit on an enqueue's payload and a
	// completion's output when the request sets none: 1 MiB of JSON text,
	// counted as given.
	DefaultMaxJSONBytes = 1 << 20
	// MaxLimit is the largest page, claim batch or recovery batch any job
	// operation accepts.
	MaxLimit = 1000
)
