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

// KnownDistributed reports whether the session's database runs Citus, as
// far as this process has already asked (Distributed), without asking:
// known is false until then. Writes whose one-server statement is also
// correct on Citus, only slower there, choose the Citus form by it, so
// they never cost a statement of their own to ask (the claim asks).
func (s *Session) KnownDistributed() (dist, known bool) {
	cfg := s.conn.Conn().Config()
	key := fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	if v, ok := distributed.Load(key); ok {
		return v.(bool), true
	}
	return false, false
}
