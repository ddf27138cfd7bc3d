package replay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/replay"
)

var validationCases = []struct {
	name        string
	key, reason string
	code        runledger.Code
}{
	{"blank key", " ", "r", "job.replay_request_key_blank"},
	{"empty key", "", "r", "job.replay_request_key_blank"},
	{"unicode-blank key", "\u00a0\u2003\t\n", "r", "job.replay_request_key_blank"},
	{"key with NUL", "a\x00b", "r", "job.replay_request_key_invalid"},
	{"key with invalid UTF-8", "a\xffb", "r", "job.replay_request_key_invalid"},
	{"513-byte key", strings.Repeat("k", 513), "r", "job.replay_request_key_too_long"},
	{"blank key wins over a bad reason", "\t", "", "job.replay_request_key_blank"},
	{"tab reason", "k", "\t", "job.replay_reason_blank"},
	{"reason with NUL", "k", "why\x00", "job.replay_reason_invalid"},
	{"reason with invalid UTF-8", "k", "\xc3\x28", "job.replay_reason_invalid"},
	{"4097-byte reason", "k", strings.Repeat("r", 4097), "job.replay_reason_too_long"},
}

func TestValidationCodes(t *testing.T) {
	t.Parallel()
	for _, c := range validationCases {
		err := replay.Request{Key: c.key, Reason: c.reason}.Validate()
		e := testdb.WantCode(t, err, c.code)
		if e.Category != runledger.CategoryValidation || e.Message == "" || e.Detail == "" {
			t.Errorf("%s: %+v", c.name, e)
		}
	}
	// The limits themselves are accepted; keys are measured in bytes.
	for _, ok := range []replay.Request{
		{Key: strings.Repeat("k", 512), Reason: strings.Repeat("r", 4096)},
		{Key: strings.Repeat("é", 256), Reason: "ok"}, // 512 bytes
		{Key: " padded ", Reason: " padded "},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("valid request refused: %v", err)
		}
	}
	if err := (replay.Request{Key: strings.Repeat("é", 257), Reason: "r"}).Validate(); runledger.CodeOf(err) != "job.replay_request_key_too_long" {
		t.Errorf("514-byte key: %v", err)
	}
}

func TestOwnedPathValidatesBeforeTakingAConnection(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.ClosedPool(t)
	for _, c := range validationCases {
		_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: c.key, Reason: c.reason})
		testdb.WantCode(t, err, c.code)
	}
	// A valid request does reach for a connection, and the closed pool's
	// failure is classified, with the operation named in the detail.
	_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	e := testdb.WantCode(t, err, runledger.CodeQueryFailed)
	if e.Category != runledger.CategoryInternal || !strings.Contains(e.Detail, "successful job replay") {
		t.Fatalf("closed pool: %+v", e)
	}
}

func TestCallerTransactionPathValidatesBeforeTouchingTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	// Whether the database runs Citus is asked once per process and
	// database: asked here, before the connection breaks, so that the
	// statement the broken connection fails is the replay's own.
	if _, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// Break the transaction's connection: any statement would now fail.
	if err := tx.Conn().Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range validationCases {
		_, err := replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: c.key, Reason: c.reason})
		testdb.WantCode(t, err, c.code)
	}
	_, err = replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if e := testdb.WantCode(t, err, runledger.CodeTransient); !strings.Contains(e.Detail, "inspect transaction isolation") {
		t.Fatalf("dead connection: %+v", e)
	}
}

func TestLongestKeyIsAcceptedAndStored(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	key := strings.Repeat("é", 256)
	out, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: key, Reason: "r"})
	if _, ok := out.(replay.NotFound); err != nil || !ok {
		t.Fatalf("512-byte key on a missing source: %v %v", out, err)
	}
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: key, Reason: " spaced\treason "}))
	if stored := testdb.Scalar[string](t, pool, `SELECT replay_request_key || '|' || reason FROM job_replays`); stored != key+"| spaced\treason " {
		t.Fatalf("stored %q: key and reason must be stored untrimmed", stored)
	}
}

func TestOwnedPathOverridesARepeatableReadSessionDefault(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	// One connection whose session default is REPEATABLE READ.
	pool := testdb.OpenPool(t, testdb.NewURL(t), 1, map[string]string{"default_transaction_isolation": "repeatable read"})
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))

	out, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if _, ok := out.(replay.NotFound); err != nil || !ok {
		t.Fatalf("owned path on a repeatable-read session: %v %v", out, err)
	}
	testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))

	tx, err := pool.Begin(ctx) // inherits the session default
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "", Reason: "r"})
	testdb.WantCode(t, err, "job.replay_request_key_blank")
	_, err = replay.SucceededJobTx(ctx, tx, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"})
	if !errors.Is(err, runledger.CodeReplayUnsupportedIsolation) {
		t.Fatalf("caller transaction on a repeatable-read session: %v", err)
	}
}

func TestOwnedPathRollsBackOnErrorAndCommitsOutcomes(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.New(t)
	sourceID := testdb.Seed(t, pool, testdb.Succeeded(runledger.Global()))
	// An outcome commits: the replay is visible to another connection.
	got := testdb.MustReplayed(t)(replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "k", Reason: "r"}))
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue WHERE id = $1`, got.Replay.JobID); n != 1 {
		t.Fatal("inserted replay not committed")
	}
	// An error after writing rolls back: a replay that the lineage insert
	// refuses (a CHECK this test adds) leaves no job behind.
	testdb.Exec(t, pool, `ALTER TABLE job_replays ADD CONSTRAINT test_no_second CHECK (replay_request_key <> 'refused')`)
	_, err := replay.SucceededJob(ctx, pool, replay.Request{SourceJobID: sourceID, ExpectedRunNumber: 1, Key: "refused", Reason: "r"})
	if e := testdb.WantCode(t, err, "db.business_rule_violation"); e.Constraint != "test_no_second" || e.SQLState != "23514" {
		t.Fatalf("%+v", e)
	}
	if n := testdb.Count(t, pool, "job_queue"); n != 2 {
		t.Fatalf("%d jobs: the refused replay was not rolled back", n)
	}
}

// The nil UUID stores the global scope: Organization(uuid.Nil) is refused
// by every entry point before it touches the database (here a closed
// pool, which any statement would fail on).
func TestNilOrganizationIsRefusedBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := testdb.Context(t)
	pool := testdb.ClosedPool(t)
	nilOrg := runledger.Organization(uuid.Nil)
	req := replay.Request{Scope: nilOrg, SourceJobID: uuid.New(), ExpectedRunNumber: 1, Key: "k", Reason: "r"}
	bulk := replay.BulkRequest{Scope: nilOrg, Key: "k", Reason: "r", Sources: []replay.Source{{JobID: req.SourceJobID, ExpectedRunNumber: 1}}}
	calls := map[string]func() error{
		"Validate":     func() error { return req.Validate() },
		"SucceededJob": func() error { _, err := replay.SucceededJob(ctx, pool, req); return err },
		"Bulk": func() error {
			_, err := replay.Bulk(ctx, pool, bulk, func(replay.BulkChunk) error { return nil })
			return err
		},
		"BulkCount": func() error { _, err := replay.BulkCount(ctx, pool, bulk); return err },
		"List": func() error {
			_, _, err := replay.List(ctx, pool, nilOrg, req.SourceJobID, replay.LineagePage{})
			return err
		},
		"Origin": func() error { _, err := replay.Origin(ctx, pool, nilOrg, req.SourceJobID); return err },
	}
	for name, call := range calls {
		if e := testdb.WantCode(t, call(), runledger.CodeOrganizationInvalid); e.Category != runledger.CategoryValidation {
			t.Fatalf("%s: %+v", name, e)
		}
	}
}
