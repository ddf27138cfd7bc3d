package planaudit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/runledger-go/runledger/internal/testdb"
)

// On Citus a statement that names its tenant must run on the one shard
// holding the tenant: its distributed plan has a single task. These are
// the statements that do not, and why.
var (
	// acrossTenants read (or, for the purge, delete) every tenant's rows,
	// without a row lock: Citus fans them out to every shard.
	acrossTenants = map[string]string{
		"JobGetTenant":                    "an unscoped worker call finds its job's tenant",
		"JobGetTenants":                   "an unscoped batch finds its jobs' tenants",
		"JobListTenantsWithDueJobs":       "the claim's first step on Citus",
		"JobListTenantsWithExpiredLeases": "lease recovery's first step on Citus",
		"JobListPageAll":                  "operator listing across scopes",
		"JobListByTypeAndStatus":          "operator listing across scopes",
		"JobEventListRecentByType":        "operator listing across scopes",
		"JobResourceClaimDeleteReleased":  "recovery's purge of released resource claims",
		"JobStatsAll":                     "queue stats across scopes (an operator's view)",
		"JobPruneListTenants":             "a prune across scopes finds its tenants, then prunes tenant by tenant",
		"ScheduleListTenantsDue":          "the schedule firers' first step on Citus",
		"ScheduleListBlocked":             "the firers' report of due schedules whose type is unavailable",
		"ScheduleAnyDue":                  "the worker's scheduler asks at every poll whether any schedule of its types is due",
	}
	// singleServer statements lock rows of every tenant in one statement,
	// which Citus refuses; on Citus the library runs their tenant-by-tenant
	// forms instead (JobClaimTenant, JobRecoverExpiredLeasesTenant).
	singleServer = map[string]string{
		"JobClaim":                "JobListTenantsWithDueJobs, then JobClaimTenant (JobClaimTenantTakeClaims and JobClaimTenantKeyed for keyed candidates) and JobEventLeasedMany",
		"JobRecoverExpiredLeases": "JobListTenantsWithExpiredLeases, then JobRecoverExpiredLeasesTenant and JobEventFailedMany",
		"ScheduleClaimDue":        "ScheduleListTenantsDue, then ScheduleClaimDueTenant",
	}
	// oneServerForms name their tenant and run on Citus, but in steps (see
	// subplanned); the library sends them to one server only, where they
	// are one statement, and on Citus sends the statements named instead,
	// each of which Citus runs in one step.
	oneServerForms = map[string][]string{
		"JobCompleteMany": {"JobCompleteManyRouted", "JobEventSucceededMany"},
		"JobFailMany":     {"JobFailManyRouted", "JobEventFailedMany"},
		// The events only when an entry records progress.
		"JobHeartbeatMany": {"JobHeartbeatManyRouted", "JobEventProgressMany"},
		// One tenant at a time.
		"JobEnqueueMany": {"JobEnqueueManyDefinitionsRouted", "JobEnqueueManyRouted", "JobEventEnqueuedMany"},
		"JobCancel":      {"JobCancelRouted", "JobEventCanceled"},
		"JobEnqueue":     {"JobEnqueueDefinitionRouted", "JobEnqueueValuesRouted", "JobEventEnqueuedMany"},
		"JobReleaseMany": {"JobReleaseManyRouted", "JobEventReleasedMany"},
		"JobRequeueBulk": {"JobRequeueBulkRouted", "JobEventRequeuedMany"},
		// On a miss, JobGetByID and JobGetForBulkRequeueClassification instead of the event.
		"JobRequeue": {"JobRequeueRouted", "JobEventRequeued"},
		// The writes only when the source was taken.
		"JobReplayInsert": {"JobReplaySourceRouted", "JobReplayJobRouted", "JobEventReplayEnqueued", "JobReplayLineageRouted"},
		// The definitions share-locked, then the second lookup; the writes for the sources without lineage.
		"JobReplayBulkInsert": {"JobEnqueueManyDefinitionsRouted", "JobReplayBulkSourcesRouted", "JobReplayBulkJobsRouted", "JobEventReplayEnqueuedMany", "JobReplayBulkLineageRouted"},
	}
)

// subplanned statements name their tenant and each of their steps runs on
// the tenant's shard, but Citus plans their CTEs apart: a CTE that writes
// with INSERT ... SELECT from another CTE is run as a step of its own,
// whose input comes back through the coordinator. Every step runs in the
// caller's distributed transaction on the same worker connection; what the
// statement relies on across its steps is held by a row lock or a unique
// key (listed for each), not by the one snapshot it has on one server.
// None is left: the statement a one-tenant operation sends to Citus runs
// in one step there (the one-server forms, which do not, are in
// oneServerForms); a new entry needs its reason.
var subplanned = map[string]string{}

// TestCitusRouting (the Citus lane, make test-citus) explains every
// statement sqlc generated, as the library sends it, with realistic values
// on a distributed database, and fails unless each statement that names a
// tenant runs as one task on one shard (every "Task Count" of its
// distributed plan, subplans included, is 1); a statement touching only
// the reference table or no table at all is routed trivially. It logs the
// cross-tenant statements with their fan-out, and checks that the
// single-server statements are refused, as the library assumes when it
// does not send them there.
func TestCitusRouting(t *testing.T) {
	if !testdb.Citus() {
		t.Skip("the Citus lane's audit: make test-citus (RUNLEDGER_TEST_CITUS=1)")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.New(t)
	values := seedAuditData(t, ctx, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	shards := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'job_queue'::regclass`)

	var fanOut, pieces []string
	routed := 0
	for _, q := range queries {
		if q.IsUtility() {
			continue
		}
		raw, err := explainJSON(ctx, conn.Conn(), q, "force_custom_plan", values)
		if forms, ok := oneServerForms[q.Name]; ok && err != nil {
			// Not sent to Citus: a form Citus refuses is as good as one
			// it would run in steps.
			pieces = append(pieces, fmt.Sprintf("%-38s refused by Citus (%v)  (sent to one server only; on Citus: %s)", q.Name, firstLine(err), strings.Join(forms, ", then ")))
			continue
		}
		if why, ok := singleServer[q.Name]; ok {
			if err == nil {
				t.Errorf("%s: Citus planned it; the library sends %s there instead", q.Name, why)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", q.Name, err)
			continue
		}
		counts, err := taskCounts(raw)
		if err != nil {
			t.Errorf("%s: %v", q.Name, err)
			continue
		}
		if why, ok := acrossTenants[q.Name]; ok {
			fanOut = append(fanOut, fmt.Sprintf("%-34s tasks %v  (%s)", q.Name, counts, why))
			continue
		}
		if forms, ok := oneServerForms[q.Name]; ok {
			// Never sent to Citus, so how Citus would run it matters only
			// to tell that its Citus forms are needed: in steps, or over
			// more than the tenant's shard.
			scans, err := citusScans(raw)
			if err != nil {
				t.Errorf("%s: %v", q.Name, err)
				continue
			}
			if scans < 2 && slices.Max(append([]int{1}, counts...)) == 1 {
				t.Errorf("%s: Citus runs it in one step on the tenant's shard; send it on Citus too, instead of %v", q.Name, forms)
			}
			pieces = append(pieces, fmt.Sprintf("%-38s %d steps, tasks %v  (sent to one server only; on Citus: %s)", q.Name, scans, counts, strings.Join(forms, ", then ")))
			continue
		}
		for _, n := range counts {
			if n != 1 {
				t.Errorf("%s: a distributed plan of %d tasks, want every statement that names a tenant on one shard: %v", q.Name, n, counts)
				break
			}
		}
		scans, err := citusScans(raw)
		if err != nil {
			t.Errorf("%s: %v", q.Name, err)
			continue
		}
		why, listed := subplanned[q.Name]
		switch {
		case scans > 1 && !listed:
			t.Errorf("%s: Citus runs it as %d distributed steps (its CTEs planned apart, results through the coordinator), want one; or list it in subplanned with why", q.Name, scans)
		case scans > 1:
			pieces = append(pieces, fmt.Sprintf("%-38s %d steps  (%s)", q.Name, scans, why))
		case listed:
			t.Errorf("%s: listed in subplanned but Citus runs it in one step", q.Name)
		}
		if len(counts) > 0 {
			routed++
		}
	}
	sort.Strings(fanOut)
	t.Logf("%d statements routed to one shard; across tenants (%d shards of job_queue):\n%s", routed, shards, strings.Join(fanOut, "\n"))
	sort.Strings(pieces)
	t.Logf("routed in several steps, each on the tenant's shard:\n%s", strings.Join(pieces, "\n"))
	for name := range acrossTenants {
		if _, ok := Get(queries, name); !ok {
			t.Errorf("acrossTenants names %s, which is not a generated statement", name)
		}
	}
	for name, forms := range oneServerForms {
		for _, f := range append([]string{name}, forms...) {
			if _, ok := Get(queries, f); !ok {
				t.Errorf("oneServerForms names %s, which is not a generated statement", f)
			}
		}
	}
}

// firstLine is the first line of err's message.
func firstLine(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "ERROR: "); i >= 0 {
		msg = msg[i:]
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// citusScans counts the Citus executor nodes of a Citus EXPLAIN (FORMAT
// JSON): one for a statement Citus runs as it is on one shard; more when
// it plans CTEs apart (recursive planning: each step's result goes through
// the coordinator to the next, each step a statement of its own on the
// worker, with its own snapshot).
func citusScans(raw []byte) (int, error) {
	n := 0
	err := eachObject(raw, func(v map[string]any) {
		if p, ok := v["Custom Plan Provider"].(string); ok && strings.HasPrefix(p, "Citus") {
			n++
		}
	})
	return n, err
}

// eachObject calls fn with every JSON object of an EXPLAIN (FORMAT JSON)
// document, nested ones included (the remote plans of Citus's tasks
// among them), in no particular order.
func eachObject(raw []byte, fn func(map[string]any)) error {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("decode plan: %w", err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			fn(v)
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	return nil
}

// taskCounts returns every "Task Count" of a Citus EXPLAIN (FORMAT JSON),
// the plan's job and its subplans', in document order; none for a plan
// Citus did not distribute (no distributed table in the statement).
func taskCounts(raw []byte) ([]int, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	var out []int
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if k == "Task Count" {
					if n, ok := v[k].(float64); ok {
						out = append(out, int(n))
					}
					continue
				}
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	return out, nil
}
