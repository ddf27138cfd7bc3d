package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/db"
	"github.com/runledger-go/runledger/internal/dberr"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/rows"
	"github.com/runledger-go/runledger/internal/txn"
	"github.com/runledger-go/runledger/internal/validate"
	"github.com/runledger-go/runledger/internal/wake"
)

// EnqueueRequest asks for a new job.
type EnqueueRequest struct {
	// Scope is the tenant the job belongs to (Global: no organization).
	Scope runledger.Scope
	// JobType must name an enabled definition.
	JobType string
	// Payload is any JSON value; nil means {}. Stored as jsonb (key order
	// and spacing are not kept).
	Payload json.RawMessage
	// Priority, MaxAttempts and TimeoutSeconds override the definition's
	// defaults; nil takes the default current at enqueue time.
	Priority       *int32
	MaxAttempts    *int32
	TimeoutSeconds *int32
	// RunAt is when the job becomes due; nil means now. A time in the
	// future gives stage scheduled instead of queued. Stored to the
	// microsecond.
	RunAt *time.Time
	// IdempotencyKey, when not empty, makes the enqueue keyed: at most one
	// job exists per (job type, scope, key), and repeating the same request
	// returns that job (runledger.DispositionExisting). "" enqueues unkeyed.
	IdempotencyKey string
	// ExecutionResourceKey, when not empty, names a resource: jobs sharing
	// it never hold a lease at the same time. "" means none.
	ExecutionResourceKey string
	// JobID, when not uuid.Nil, is the new job's id instead of a fresh
	// UUIDv7, and makes the enqueue idempotent on it: repeating the same
	// request with the same JobID returns the job it created
	// (runledger.DispositionExisting, in its current state) and writes
	// nothing, so an enqueue whose outcome is unknown
	// (runledger.ErrCommitUnconfirmed) can be retried safely, keyed or
	// not. Another request naming an id that a job holds is
	// runledger.CodeIdempotencyConflict, which says nothing of that job:
	// on PostgreSQL an id held in any scope, on Citus one held in the
	// request's tenant (ids are unique per tenant there). Choose ids that
	// cannot collide (uuid.NewV7).
	JobID uuid.UUID
	// MaxPayloadBytes caps len(Payload) for this call; zero (or negative)
	// means runledger.DefaultMaxJSONBytes. It is a guard, not stored, and not part of
	// the request a keyed retry must repeat.
	MaxPayloadBytes int
}

// Validate checks the request without touching the database, returning the
// first failure: scope (job.organization_invalid), job type (job.job_type_blank, job.job_type_invalid,
// job.job_type_too_long: over runledger.MaxJobTypeBytes), payload
// (job.payload_too_large: over MaxPayloadBytes; job.payload_invalid: not
// JSON, or JSON jsonb cannot store),
// max attempts and timeout (must be positive: job.max_attempts_invalid,
// job.timeout_invalid), run-at (job.run_at_invalid: the zero time or
// outside years 1 to 9999), idempotency key when set (job.idempotency_key_invalid:
// blank after trimming Unicode white space, NUL or invalid UTF-8, over 512
// bytes), execution resource key when set
// (job.invalid_execution_resource_key: the same rules as the idempotency
// key).
func (r EnqueueRequest) Validate() error {
	if err := validate.Scope(r.Scope); err != nil {
		return err
	}
	if err := validate.JobType(r.JobType); err != nil {
		return err
	}
	if r.Payload != nil {
		if max := validate.JSONLimit(r.MaxPayloadBytes); len(r.Payload) > max {
			return validate.Invalid(errPayloadTooLarge, "job payload must be at most %d bytes, got %d", max, len(r.Payload))
		}
		if err := validate.JSONB(r.Payload); err != nil {
			return validate.Invalid(errPayloadInvalid, "job payload: %v", err)
		}
	}
	if r.MaxAttempts != nil && *r.MaxAttempts <= 0 {
		return validate.Invalid(errMaxAttemptsInvalid, "max attempts must be positive, got %d", *r.MaxAttempts)
	}
	if r.TimeoutSeconds != nil && *r.TimeoutSeconds <= 0 {
		return validate.Invalid(errTimeoutInvalid, "timeout seconds must be positive, got %d", *r.TimeoutSeconds)
	}
	if r.RunAt != nil {
		if y := r.RunAt.UTC().Year(); r.RunAt.IsZero() || y < 1 || y > 9999 {
			return validate.Invalid(errRunAtInvalid, "run-at %s is the zero time or outside years 1 to 9999", r.RunAt)
		}
	}
	if r.IdempotencyKey != "" {
		switch k := r.IdempotencyKey; validate.Text(k, runledger.MaxKeyBytes) {
		case validate.Blank:
			return validate.Invalid(errIdempotencyKeyInvalid, "idempotency key is blank")
		case validate.Unclean:
			return validate.Invalid(errIdempotencyKeyInvalid, "idempotency key holds a NUL byte or invalid UTF-8")
		case validate.TooLong:
			return validate.Invalid(errIdempotencyKeyInvalid, "idempotency key must be at most %d bytes, got %d", runledger.MaxKeyBytes, len(k))
		}
	}
	if r.ExecutionResourceKey != "" {
		if k := r.ExecutionResourceKey; validate.Text(k, runledger.MaxKeyBytes) != validate.OK {
			return errResourceKeyInvalid.Newf(
				"execution resource key is blank, holds NUL or invalid UTF-8, or is %d bytes long", len(k))
		}
	}
	return nil
}

func (r EnqueueRequest) keyed() bool { return r.IdempotencyKey != "" }

// idempotent reports a request a retry must resolve to the same job: keyed,
// or with a chosen id. Its snapshot is stored and compared.
func (r EnqueueRequest) idempotent() bool { return r.keyed() || r.JobID != uuid.Nil }

// EnqueueResult is the job an enqueue created or found.
type EnqueueResult struct {
	// Job is the job as stored now: the new job (PENDING, run 1, attempt 0)
	// when Inserted; the existing job in its current state, whatever it is
	// (possibly leased, finished, or replayed from), when Existing.
	Job         runledger.Job         `json:"job"`
	Disposition runledger.Disposition `json:"disposition"`
}

// Enqueue creates a job and its ENQUEUED event.
//
// Unkeyed, without a chosen JobID, it is one statement on a pooled
// connection: the definition must exist and be enabled (else
// runledger.CodeDefinitionNotFoundOrDisabled, nothing written); nil
// settings take its defaults; the id is a new UUIDv7. When the statement
// was sent and its reply lost, the job may exist: the error matches
// runledger.ErrCommitUnconfirmed, and a retry would create a second job,
// so set JobID (or IdempotencyKey) where a retry must be safe.
//
// Keyed, or with a chosen JobID, it runs in a READ COMMITTED transaction
// of its own, one round trip. The insert does nothing when a job with the
// same type, scope and key (or with the id) exists (it waits for an
// uncommitted competitor first); that job is then locked FOR NO KEY
// UPDATE and compared with this request's canonical snapshot (job type,
// organization, payload, priority, max attempts, timeout, run-at, resource
// key and chosen id as given: a nil setting stays null, so it is not the
// same request as one naming the default explicitly; JSON equality, so
// key order and spacing do not matter). The same request returns it with
// runledger.DispositionExisting; another request is
// runledger.CodeIdempotencyConflict. Existing is returned even when the
// definition has since been disabled. A failed COMMIT matches
// runledger.ErrCommitUnconfirmed; repeating such an enqueue is safe.
//
// On Citus either kind is a transaction of three round trips (the
// definition read FOR SHARE, the insert with a keyed request's lookups,
// the event with the COMMIT), each statement run in one step on the
// tenant's shard; the outcomes and errors are the same.
func Enqueue(ctx context.Context, pool *pgxpool.Pool, req EnqueueRequest) (EnqueueResult, error) {
	if err := req.Validate(); err != nil {
		return EnqueueResult{}, err
	}
	op := unkeyedOperation
	if req.idempotent() {
		op = keyedOperation
	}
	s, err := txn.Own(ctx, pool, op)
	if err != nil {
		return EnqueueResult{}, err
	}
	defer s.End(ctx)
	return enqueue(ctx, s, req)
}

const (
	keyedOperation   = "keyed job enqueue"
	unkeyedOperation = "job enqueue"
)

// EnqueueTx is Enqueue inside the caller's transaction, which it never
// commits or rolls back. A keyed request, or one with a chosen JobID,
// requires READ COMMITTED (else runledger.CodeEnqueueUnsupportedIsolation),
// because the lookup after a conflicting insert must see the competitor's
// committed row; after an Existing result the existing job stays locked
// until the caller's transaction ends (claims skip it). Any other request
// is one statement and runs under any isolation. The definition row is
// held FOR SHARE until the transaction ends.
func EnqueueTx(ctx context.Context, tx pgx.Tx, req EnqueueRequest) (EnqueueResult, error) {
	if err := req.Validate(); err != nil {
		return EnqueueResult{}, err
	}
	op := unkeyedOperation
	if req.idempotent() {
		op = keyedOperation
	}
	return enqueue(ctx, txn.Join(tx, op), req)
}

// enqueue inserts a validated request: an unkeyed job with one statement,
// an idempotent one with the insert and its lookups in one round trip.
func enqueue(ctx context.Context, s *txn.Session, req EnqueueRequest) (EnqueueResult, error) {
	params, err := enqueueParams(req)
	if err != nil {
		return EnqueueResult{}, err
	}
	if !req.idempotent() {
		return enqueueUnkeyed(ctx, s, params)
	}
	return enqueueKeyed(ctx, s, req, params)
}

// requestSnapshot is the canonical form of a keyed request, stored in
// enqueue_request and compared (as jsonb) on a repeated request.
type requestSnapshot struct {
	JobType              string          `json:"job_type"`
	OrganizationID       *uuid.UUID      `json:"organization_id"`
	Payload              json.RawMessage `json:"payload"`
	Priority             *int32          `json:"priority"`
	MaxAttempts          *int32          `json:"max_attempts"`
	TimeoutSeconds       *int32          `json:"timeout_seconds"`
	RunAt                *string         `json:"run_at"`
	ExecutionResourceKey *string         `json:"execution_resource_key"`
	// JobID is set only when the caller chose the id, so that snapshots of
	// requests without one stay as they were.
	JobID *uuid.UUID `json:"job_id,omitempty"`
}

// runAtLayout formats a run-at time in the snapshot: UTC, to the
// microsecond PostgreSQL stores.
const runAtLayout = "2006-01-02T15:04:05.000000Z07:00"

var emptyObject = json.RawMessage(`{}`)

// enqueueParams builds the statement's arguments: a new UUIDv7, the
// effective payload and, for a keyed request, the snapshot.
func enqueueParams(req EnqueueRequest) (db.JobEnqueueParams, error) {
	id := req.JobID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return db.JobEnqueueParams{}, errs.JobIDFailed.New("generate job id: " + err.Error())
		}
	}
	payload := req.Payload
	if payload == nil {
		payload = emptyObject
	}
	var runAt *time.Time
	if req.RunAt != nil {
		t := req.RunAt.UTC().Truncate(time.Microsecond)
		runAt = &t
	}
	p := db.JobEnqueueParams{
		JobType:              req.JobType,
		ID:                   id,
		OrganizationID:       rows.Tenant(req.Scope),
		Payload:              payload,
		Priority:             req.Priority,
		MaxAttempts:          req.MaxAttempts,
		TimeoutSeconds:       req.TimeoutSeconds,
		NextRunAt:            runAt,
		ExecutionResourceKey: optionalText(req.ExecutionResourceKey),
	}
	if req.idempotent() {
		snap := requestSnapshot{
			JobType:              req.JobType,
			OrganizationID:       req.Scope.OrganizationIDPtr(), // null for Global, as snapshots always stored it
			Payload:              payload,
			Priority:             req.Priority,
			MaxAttempts:          req.MaxAttempts,
			TimeoutSeconds:       req.TimeoutSeconds,
			ExecutionResourceKey: p.ExecutionResourceKey,
		}
		if runAt != nil {
			s := runAt.Format(runAtLayout)
			snap.RunAt = &s
		}
		if req.JobID != uuid.Nil {
			chosen := req.JobID
			snap.JobID = &chosen
		}
		b, err := json.Marshal(snap)
		if err != nil {
			return db.JobEnqueueParams{}, errs.Invariant("encode enqueue request snapshot: " + err.Error())
		}
		if req.keyed() {
			key := req.IdempotencyKey
			p.IdempotencyKey = &key
		}
		p.EnqueueRequest = b
	}
	return p, nil
}

func optionalText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// wakes returns the job types whose workers an insert of p wakes: its own
// when the job is due now and this process has not woken them within
// wake.Interval; none otherwise.
func wakes(p db.JobEnqueueParams) []string {
	if (p.NextRunAt == nil || !p.NextRunAt.After(time.Now())) && wake.Due(p.JobType) {
		return []string{p.JobType}
	}
	return nil
}

// enqueueUnkeyed inserts an unkeyed job without a chosen id: one
// statement (and the workers' wake-up beside it), no isolation
// requirement; outside a caller's transaction the batch commits on its
// own, so a lost reply is an unknown outcome.
func enqueueUnkeyed(ctx context.Context, s *txn.Session, p db.JobEnqueueParams) (EnqueueResult, error) {
	dist, err := s.Distributed(ctx)
	if err != nil {
		return EnqueueResult{}, err
	}
	if dist {
		return enqueueRouted(ctx, s, EnqueueRequest{}, p)
	}
	b := s.AutocommitBatch(ctx)
	ins := txn.Queue(b, "enqueue job", func(q db.DBTX) (db.JobEnqueueRow, error) {
		return queries.JobEnqueue(ctx, q, p)
	})
	wake.Queue(ctx, b, wakes(p)...)
	if err := b.Send(ctx); err != nil {
		return EnqueueResult{}, err
	}
	return unkeyedResult(p, ins.Val, ins.Err)
}

// insertUnkeyed is enqueueUnkeyed's statements run on q, inside a
// transaction of the caller's (a workflow step's enqueue).
func insertUnkeyed(ctx context.Context, q db.DBTX, p db.JobEnqueueParams) (EnqueueResult, error) {
	row, err := queries.JobEnqueue(ctx, q, p)
	if err == nil {
		err = wake.Send(ctx, q, wakes(p)...)
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		err = dberr.Translate(ctx, "enqueue job", err)
	}
	return unkeyedResult(p, row, err)
}

// unkeyedResult is the result of an unkeyed insert whose row and error are
// in.
func unkeyedResult(p db.JobEnqueueParams, row db.JobEnqueueRow, err error) (EnqueueResult, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return EnqueueResult{}, errs.DefinitionUnavailableFor(p.JobType)
	}
	if err != nil {
		return EnqueueResult{}, err
	}
	if row.ID != p.ID {
		return EnqueueResult{}, errs.Invariant("enqueue returned another job than the one inserted")
	}
	job, err := rows.Job(db.JobQueue(row))
	if err != nil {
		return EnqueueResult{}, err
	}
	return EnqueueResult{Job: job, Disposition: runledger.DispositionInserted}, nil
}

// keyRow is the job holding a key or an id, as a lookup returns it.
type keyRow struct {
	job  db.JobQueue
	same bool
}

// enqueueKeyed inserts a keyed job, or one with a chosen id, or resolves
// the existing one, in one round trip: [BEGIN READ COMMITTED,] the insert
// (ON CONFLICT DO NOTHING), the lookup that locks the job holding the key
// (guarded in SQL to run only when the insert wrote nothing), the lookup
// that locks the job holding the chosen id[, COMMIT]. A caller's
// transaction is first checked to be read-write READ COMMITTED (a round
// trip of its own, txn.CheckCallerTx), so that a lookup after an insert
// that did nothing sees the row that made it do nothing; the insert and
// lookups also guard on the isolation in SQL.
func enqueueKeyed(ctx context.Context, s *txn.Session, req EnqueueRequest, p db.JobEnqueueParams) (EnqueueResult, error) {
	if err := txn.CheckCallerTx(ctx, s, keyedOperation, errs.EnqueueUnsupportedIsolation); err != nil {
		return EnqueueResult{}, err
	}
	dist, err := s.Distributed(ctx)
	if err != nil {
		return EnqueueResult{}, err
	}
	if dist {
		return enqueueRouted(ctx, s, req, p)
	}
	b := s.Batch(ctx)
	ins := txn.Queue(b, "enqueue job", func(q db.DBTX) (db.JobEnqueueRow, error) {
		return queries.JobEnqueue(ctx, q, p)
	})
	byKey, byID := queueLookups(ctx, b, req, p)
	wake.Queue(ctx, b, wakes(p)...)
	b.Commit(ctx)
	if err := b.Send(ctx); err != nil {
		return EnqueueResult{}, err
	}
	return resolveKeyed(ctx, s, req, p, ins, byKey, byID)
}

// queueLookups queues, for an idempotent request, the lookups that lock
// the job holding its key and the one holding its chosen id (each guarded
// in SQL to find nothing when the insert before it wrote the job).
func queueLookups(ctx context.Context, b *txn.Batch, req EnqueueRequest, p db.JobEnqueueParams) (byKey, byID *txn.Step[keyRow]) {
	if req.keyed() {
		byKey = txn.Queue(b, "lock job by idempotency key", func(q db.DBTX) (keyRow, error) {
			if req.Scope.IsGlobal() {
				r, err := queries.JobLockByIdempotencyKeyGlobal(ctx, q, db.JobLockByIdempotencyKeyGlobalParams{
					EnqueueRequest: p.EnqueueRequest, JobType: p.JobType, IdempotencyKey: p.IdempotencyKey, InsertedID: p.ID,
				})
				return keyRow{r.JobQueue, r.SameRequest}, err
			}
			r, err := queries.JobLockByIdempotencyKeyOrg(ctx, q, db.JobLockByIdempotencyKeyOrgParams{
				EnqueueRequest: p.EnqueueRequest, OrganizationID: p.OrganizationID, JobType: p.JobType,
				IdempotencyKey: p.IdempotencyKey, InsertedID: p.ID,
			})
			return keyRow{r.JobQueue, r.SameRequest}, err
		})
	}
	if req.JobID != uuid.Nil {
		byID = txn.Queue(b, "lock job by chosen id", func(q db.DBTX) (keyRow, error) {
			r, err := queries.JobLockForEnqueueByID(ctx, q, db.JobLockForEnqueueByIDParams{
				EnqueueRequest: p.EnqueueRequest, OrganizationID: p.OrganizationID, ID: p.ID,
			})
			return keyRow{r.JobQueue, r.SameRequest}, err
		})
	}
	return byKey, byID
}

// resolveKeyed turns an idempotent enqueue's insert and lookups into its
// result: the inserted job, the existing one, an idempotency conflict, or
// why the insert wrote nothing.
func resolveKeyed(ctx context.Context, s *txn.Session, req EnqueueRequest, p db.JobEnqueueParams,
	ins *txn.Step[db.JobEnqueueRow], byKey, byID *txn.Step[keyRow]) (EnqueueResult, error) {
	if ins.Row() {
		if byKey != nil && byKey.Row() {
			return EnqueueResult{}, errs.Invariant("idempotency key lookup ran after an insert that wrote the job")
		}
		if ins.Val.ID != p.ID {
			return EnqueueResult{}, errs.Invariant("enqueue returned another job than the one inserted")
		}
		job, err := rows.Job(db.JobQueue(ins.Val))
		if err != nil {
			return EnqueueResult{}, err
		}
		return EnqueueResult{Job: job, Disposition: runledger.DispositionInserted}, nil
	}
	for _, st := range []*txn.Step[keyRow]{byKey, byID} {
		if st == nil || !st.Row() {
			continue
		}
		existing, err := rows.Job(st.Val.job)
		if err != nil {
			return EnqueueResult{}, err
		}
		if !st.Val.same {
			if st == byID {
				// The id may belong to another tenant's job: name nothing of it.
				return EnqueueResult{}, errs.IdempotencyConflict.Newf(
					"job id %s is held by a job enqueued with a different request", p.ID)
			}
			return EnqueueResult{}, errs.IdempotencyConflict.New(
				fmt.Sprintf("job %s of type %q in scope %s holds idempotency key %q with a different request",
					existing.ID, req.JobType, req.Scope, req.IdempotencyKey))
		}
		return EnqueueResult{Job: existing, Disposition: runledger.DispositionExisting}, nil
	}
	if req.JobID != uuid.Nil {
		// The chosen id may be another tenant's (on PostgreSQL an id is
		// unique across tenants): a conflict that names nothing of it.
		if _, err := queries.JobGetTenant(ctx, s.DB(), p.ID); err == nil {
			return EnqueueResult{}, errs.IdempotencyConflict.Newf(
				"job id %s is held by a job enqueued with a different request", p.ID)
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return EnqueueResult{}, dberr.Translate(ctx, "read the tenant of a chosen job id", err)
		}
	}
	return EnqueueResult{}, explainEmptyInsert(ctx, s.DB(), req)
}

// errIdempotencyMissingExisting is the Internal error of a keyed enqueue
// that inserted nothing although the definition is enabled and no job
// holds the key.
var errIdempotencyMissingExisting = errs.Internal("job.idempotency_conflict_missing_existing",
	"Job enqueue retry could not be resolved.")

// explainEmptyInsert tells why a keyed insert wrote nothing although no job
// holds the key: normally the definition is missing or disabled. If the
// definition is enabled after all, the job that held the key vanished
// between the two statements (deleted); that is reported as an Internal
// error rather than as a definition problem. Retrying the request resolves
// it either way.
func explainEmptyInsert(ctx context.Context, tx db.DBTX, req EnqueueRequest) error {
	def, err := queries.JobDefinitionGetByJobType(ctx, tx, req.JobType)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !def.IsEnabled) {
		return errs.DefinitionUnavailableFor(req.JobType)
	}
	if err != nil {
		return dberr.Translate(ctx, "read job definition after empty keyed enqueue", err)
	}
	return errIdempotencyMissingExisting.Newf("keyed enqueue of type %q key %q in scope %s inserted nothing, the definition is enabled, and no job holds the key",
		req.JobType, req.IdempotencyKey, req.Scope)
}

// enqueueRouted is the enqueue on Citus, where JobEnqueue runs in steps
// through the coordinator (its event INSERT and its INSERT ... SELECT
// planned apart, the rows sent to every worker): three round trips in one
// transaction, each statement run in one step on the tenant's shard.
// [BEGIN,] the definition read FOR SHARE (JobEnqueueDefinitionRouted);
// then, when it allows the insert, the insert with the definition's
// defaults resolved (JobEnqueueValuesRouted); for an idempotent request,
// the lookups of the job holding its key or id (after the insert, or
// instead of it when the definition read found the id taken); then the
// ENQUEUED event from the inserted row (JobEventEnqueuedMany), the
// workers' wake-up[, COMMIT]. req is the zero request for an unkeyed one
// (only p is used then). The result is JobEnqueue's.
func enqueueRouted(ctx context.Context, s *txn.Session, req EnqueueRequest, p db.JobEnqueueParams) (EnqueueResult, error) {
	idempotent := p.EnqueueRequest != nil
	b := s.Batch(ctx)
	def := txn.Queue(b, "read job definition", func(q db.DBTX) (db.JobEnqueueDefinitionRoutedRow, error) {
		return queries.JobEnqueueDefinitionRouted(ctx, q, db.JobEnqueueDefinitionRoutedParams{
			JobType: p.JobType, OrganizationID: p.OrganizationID, ID: p.ID, EnqueueRequest: p.EnqueueRequest,
		})
	})
	if err := b.Send(ctx); err != nil {
		return EnqueueResult{}, err
	}
	if def.Err != nil && !errors.Is(def.Err, pgx.ErrNoRows) {
		return EnqueueResult{}, def.Err
	}
	if !def.Row() && !idempotent {
		return EnqueueResult{}, errs.DefinitionUnavailableFor(p.JobType)
	}
	ins := &txn.Step[db.JobEnqueueRow]{Err: pgx.ErrNoRows}
	var byKey, byID *txn.Step[keyRow]
	b = s.Batch(ctx)
	if def.Row() {
		d := def.Val
		v := db.JobEnqueueValuesRoutedParams{
			ID: p.ID, JobType: p.JobType, OrganizationID: p.OrganizationID, Payload: p.Payload,
			Priority: d.DefaultPriority, MaxAttempts: d.MaxAttempts, TimeoutSeconds: d.DefaultTimeoutSeconds,
			NextRunAt: p.NextRunAt, IdempotencyKey: p.IdempotencyKey, EnqueueRequest: p.EnqueueRequest,
			ExecutionResourceKey: p.ExecutionResourceKey,
		}
		if p.Priority != nil {
			v.Priority = *p.Priority
		}
		if p.MaxAttempts != nil {
			v.MaxAttempts = *p.MaxAttempts
		}
		if p.TimeoutSeconds != nil {
			v.TimeoutSeconds = *p.TimeoutSeconds
		}
		ins = txn.Queue(b, "enqueue job", func(q db.DBTX) (db.JobEnqueueRow, error) {
			r, err := queries.JobEnqueueValuesRouted(ctx, q, v)
			return db.JobEnqueueRow(r), err
		})
	}
	if idempotent {
		byKey, byID = queueLookups(ctx, b, req, p)
	}
	if err := b.Send(ctx); err != nil {
		return EnqueueResult{}, err
	}
	if ins.Err != nil && !errors.Is(ins.Err, pgx.ErrNoRows) {
		return EnqueueResult{}, ins.Err
	}
	b = s.Batch(ctx)
	if ins.Row() {
		r := ins.Val
		txn.Queue(b, "record the enqueued event", func(q db.DBTX) (struct{}, error) {
			return struct{}{}, queries.JobEventEnqueuedMany(ctx, q, db.JobEventEnqueuedManyParams{
				OrganizationID: r.OrganizationID, Ids: []uuid.UUID{r.ID}, Stages: []string{r.Stage}, JobTypes: []string{r.JobType},
			})
		})
		wake.Queue(ctx, b, wakes(p)...)
	}
	b.Commit(ctx)
	if ins.Row() || s.Owned() {
		if err := b.Send(ctx); err != nil {
			return EnqueueResult{}, err
		}
	}
	if !idempotent {
		return unkeyedResult(p, ins.Val, ins.Err)
	}
	return resolveKeyed(ctx, s, req, p, ins, byKey, byID)
}
