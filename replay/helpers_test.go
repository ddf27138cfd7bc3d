package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runledger-go/runledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// rowLocks is what NOWAIT probes from another connection see of a job row.
type rowLocks struct {
	keyShareBlocked bool // someone holds FOR UPDATE
	shareBlocked    bool // someone holds FOR NO KEY UPDATE or FOR UPDATE
	updateBlocked   bool // someone holds any row lock
}

// heldNoKeyUpdate reports exactly a FOR NO KEY UPDATE lock by another
// transaction: it blocks FOR SHARE but lets FOR KEY SHARE through.
func (l rowLocks) heldNoKeyUpdate() bool { return l.shareBlocked && !l.keyShareBlocked }

// unlocked reports that no other transaction holds any lock on the row.
func (l rowLocks) unlocked() bool { return !l.updateBlocked }

func probeRowLocks(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) rowLocks {
	t.Helper()
	probe := func(mode string) bool { return testdb.RowLocked(t, pool, "job_queue", "id = $1", id, mode) }
	return rowLocks{
		keyShareBlocked: probe("KEY SHARE"),
		shareBlocked:    probe("SHARE"),
		updateBlocked:   probe("UPDATE"),
	}
}

// rowLockHolders asks PostgreSQL who holds a lock on a job row: it starts a
// FOR UPDATE of the row on another connection, waits until pg_locks shows
// that connection waiting (or the statement finishing, meaning nobody holds
// the row), and returns pg_blocking_pids of the waiter. The waiter is then
// canceled.
func rowLockHolders(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) []uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire waiter: %v", err)
	}
	defer conn.Release()
	waiterPID := conn.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() {
		tx, err := conn.Begin(ctx)
		if err != nil {
			done <- err
			return
		}
		var tenant uuid.UUID
		if err = tx.QueryRow(ctx, `SELECT organization_id FROM job_queue WHERE id = $1`, id).Scan(&tenant); err == nil {
			_, err = tx.Exec(ctx, `SELECT 1 FROM job_queue WHERE organization_id = $1 AND id = $2 FOR UPDATE`, tenant, id)
		}
		_ = tx.Rollback(context.Background())
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			return nil
		default:
		}
		var blockers []uint32
		if err := pool.QueryRow(context.Background(), `
			SELECT coalesce(array_agg(b.pid ORDER BY b.pid), '{}')::int8[]::int4[]
			FROM (`+testdb.BlockersSQL()+`) AS b
			WHERE EXISTS (SELECT 1 FROM (`+testdb.WaitersSQL()+`) w WHERE w.pid = $1)`,
			int32(waiterPID)).Scan(&blockers); err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		if len(blockers) > 0 {
			// Cancel on the server, not through ctx: the waiter's connection
			// stays usable, so its rollback completes before we return and
			// it never gets to take the lock later.
			testdb.Exec(t, pool, `SELECT pg_cancel_backend($1::int)`, int32(waiterPID))
			<-done
			return blockers
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("waiter on job %s neither blocked nor finished", id)
	return nil
}

func testdbURLForExample() (string, error) { return testdb.NewURLForExample() }
