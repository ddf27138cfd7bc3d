package planaudit

import (
	"regexp"
	"testing"
)

// updateJobQueue finds each UPDATE of job_queue and its SET list, up to
// the FROM, WHERE or RETURNING that ends it.
var updateJobQueue = regexp.MustCompile(`(?is)\bUPDATE\s+job_queue\b(?:\s+(?:AS\s+)?\w+)?\s+SET\s+(.*?)(?:\bFROM\b|\bWHERE\b|\bRETURNING\b|$)`)

var setsUpdatedAt = regexp.MustCompile(`(?i)(?:^|,)\s*updated_at\s*=\s*now\(\)`)

// TestEveryJobQueueUpdateSetsUpdatedAt checks, in the text of every
// generated statement, that each UPDATE of job_queue sets updated_at =
// now(): no trigger does it (migration 00014), so a statement that forgot
// would leave the job's updated_at behind its last change.
func TestEveryJobQueueUpdateSetsUpdatedAt(t *testing.T) {
	t.Parallel()
	queries, err := Load("../../../db")
	if err != nil {
		t.Fatal(err)
	}
	updates := 0
	for _, q := range queries {
		for _, m := range updateJobQueue.FindAllStringSubmatch(q.Body(), -1) {
			updates++
			if !setsUpdatedAt.MatchString(m[1]) {
				t.Errorf("%s: an UPDATE of job_queue does not set updated_at = now(): SET %s", q.Name, m[1])
			}
		}
	}
	if updates == 0 {
		t.Fatal("no UPDATE of job_queue found in the generated statements")
	}
	t.Logf("%d updates of job_queue, each sets updated_at", updates)

	// The check itself: an update without it is caught.
	if m := updateJobQueue.FindStringSubmatch("UPDATE job_queue jq SET status = 'PENDING' WHERE id = $1"); m == nil || setsUpdatedAt.MatchString(m[1]) {
		t.Fatal("an UPDATE without updated_at passed the check")
	}
}
