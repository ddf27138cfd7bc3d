package txn

import (
	"context"
	"fmt"
	"sync"

	"github.com/runledger-go/runledger/internal/dberr"
)

// distributed caches, per database (host, port and name), whether it runs
// Citus: an extension is not installed or removed under a running
// application, so it is asked once per process.
var distributed sync.Map

// Distributed reports whether the session's database runs Citus (the
// citus extension is installed). The operations over every tenant (the
// claim, lease recovery) then go tenant by tenant, since Citus takes row
// locks only in a statement routed to one tenant. The first call per
// database costs one statement on the session.
func (s *Session) Distributed(ctx context.Context) (bool, error) {
	cfg := s.conn.Conn().Config()
	key := fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	if v, ok := distributed.Load(key); ok {
		return v.(bool), nil
	}
	v, err := queries.ServerIsDistributed(ctx, s.DB())
	if err != nil {
		return false, dberr.Translate(ctx, "read whether the database runs Citus", err)
	}
	distributed.Store(key, v)
	return v, nil
}
