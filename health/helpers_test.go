package health_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var (
	orgA = uuid.MustParse("00000000-0000-4000-8000-00000000000a")
	orgB = uuid.MustParse("00000000-0000-4000-8000-00000000000b")
)

// job describes a row of job_queue that a test inserts by hand.
type job struct {
	org      uuid.UUID
	jobType  string
	status   string
	finished time.Duration // how long before now() it finished (finished jobs)
	ran      time.Duration // finished_at - started_at; 0 leaves started_at NULL
	due      time.Duration // next_run_at - now() (PENDING)
	lease    time.Duration // lease_expires_at - now() (LEASED)
	events   int
}

// insert writes j (and j.events events) and returns its id.
func insert(t testing.TB, q testdb.Querier, j job) uuid.UUID {
	t.Helper()
	if j.jobType == "" {
		j.jobType = "t"
	}
	testdb.Exec(t, q, `INSERT INTO job_definitions (job_type) VALUES ($1) ON CONFLICT DO NOTHING`, j.jobType)
	id := uuid.Must(uuid.NewV7())
	testdb.Exec(t, q, `
		INSERT INTO job_queue (id, organization_id, job_type, status, max_attempts, attempt, next_run_at,
		                       lease_expires_at, worker_id, started_at, finished_at, stage)
		SELECT $1, $2, $3, $4::job_status, 3,
		       CASE WHEN $4 = 'PENDING' THEN 0 ELSE 1 END,
		       now() + $5 * interval '1 microsecond',
		       CASE WHEN $4 = 'LEASED' THEN now() + $6 * interval '1 microsecond' END,
		       CASE WHEN $4 = 'LEASED' THEN 'w' END,
		       CASE WHEN $4 = 'LEASED' THEN now()
		            WHEN $4 IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED') AND $8 > 0
		            THEN now() - $7 * interval '1 microsecond' - $8 * interval '1 microsecond' END,
		       CASE WHEN $4 IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED') THEN now() - $7 * interval '1 microsecond' END,
		       CASE WHEN $4 = 'SUCCEEDED' THEN 'completed' WHEN $4 = 'LEASED' THEN 'running' ELSE 'queued' END`,
		id, j.org, j.jobType, j.status, j.due.Microseconds(), j.lease.Microseconds(), j.finished.Microseconds(), j.ran.Microseconds())
	if j.events > 0 {
		testdb.Exec(t, q, `INSERT INTO job_events (organization_id, job_id, event_type)
			SELECT $1, $2, 'ENQUEUED' FROM generate_series(1, $3)`, j.org, id, j.events)
	}
	return id
}

// link records that replay was replayed from source.
func link(t testing.TB, q testdb.Querier, source, replay uuid.UUID) {
	t.Helper()
	testdb.Exec(t, q, `INSERT INTO job_replays (organization_id, source_job_id, source_run_number, replay_request_key, reason, replay_job_id)
		SELECT organization_id, id, run_number, 'k-' || $2::uuid::text, 'r', $2::uuid FROM job_queue WHERE id = $1`, source, replay)
}

// exists reports whether job id is still stored.
func exists(t testing.TB, q testdb.Querier, id uuid.UUID) bool {
	t.Helper()
	return testdb.Scalar[bool](t, q, `SELECT EXISTS (SELECT 1 FROM job_queue WHERE id = $1)`, id)
}

// noOrphanEvents fails when an event's job is gone. Events have no
// foreign key to their job: the prune deletes both in one statement, and
// this check, one query over the whole table, stands where the key stood.
func noOrphanEvents(t testing.TB, q testdb.Querier) {
	t.Helper()
	if n := testdb.Scalar[int64](t, q, `SELECT count(*) FROM job_events e
		WHERE NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.organization_id = e.organization_id AND q.id = e.job_id)`); n != 0 {
		t.Fatalf("%d events whose job is gone", n)
	}
}
