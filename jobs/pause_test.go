package jobs_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/testdb"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/lease"
)

// A paused type's jobs stay PENDING through claims (of every type, and of
// that type by name) while enqueues are accepted and other types are
// claimed; resumed, its jobs are claimed in the usual order. The pause is
// the definition's row: another connection reads it.
func TestPauseTypeStopsClaimsAndResumeRunsWhatQueued(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	testdb.Define(t, ctx, pool, jobs.DefinitionInput{JobType: "sms"})
	org := runledger.Organization(uuid.New())
	var emails []uuid.UUID
	for i := range 3 {
		scope := runledger.Global()
		if i == 1 {
			scope = org // on Citus the claim goes tenant by tenant
		}
		emails = append(emails, testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "email", Scope: scope}).ID)
	}
	sms := testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "sms", Scope: org}).ID

	def, err := jobs.PauseType(ctx, pool, "email")
	if err != nil {
		t.Fatal(err)
	}
	if !def.Paused || def.JobType != "email" {
		t.Fatalf("paused definition %+v", def)
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10}); len(got) != 1 || got[0].ID != sms {
		t.Fatalf("claim while email is paused got %v, want only the sms job %s", testdb.IDs(got), sms)
	}
	if got := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 10, JobTypes: []string{"email"}}); len(got) != 0 {
		t.Fatalf("claim of the paused type got %v", testdb.IDs(got))
	}
	// Enqueues are still accepted, single and bulk.
	emails = append(emails, testdb.Enqueue(t, ctx, pool, jobs.EnqueueRequest{JobType: "email"}).ID)
	res, err := jobs.EnqueueMany(ctx, pool, []jobs.EnqueueRequest{{JobType: "email", Scope: org}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("bulk enqueue of a paused type: %v %+v", err, res)
	}
	emails = append(emails, res[0].Job.ID)
	if n := testdb.Scalar[int64](t, pool, `SELECT count(*) FROM job_queue WHERE job_type = 'email' AND status = 'PENDING'`); n != 5 {
		t.Fatalf("%d PENDING email jobs, want 5", n)
	}

	// Durable: the pause is the definition's column, read anew.
	other := testdb.OpenPool(t, pool.Config().ConnString(), 1, nil)
	if d, err := jobs.GetDefinition(ctx, other, "email"); err != nil || !d.Paused {
		t.Fatalf("definition read on another connection: %+v, %v", d, err)
	}
	if again, err := jobs.PauseType(ctx, pool, "email"); err != nil || !again.Paused || again.Version != def.Version {
		t.Fatalf("pausing again: %+v, %v", again, err)
	}

	if d, err := jobs.ResumeType(ctx, pool, "email"); err != nil || d.Paused {
		t.Fatalf("resume: %+v, %v", d, err)
	}
	var got []uuid.UUID
	for len(got) < len(emails) {
		c := testdb.Claim(t, ctx, pool, lease.ClaimRequest{Limit: 1})
		if len(c) != 1 {
			t.Fatalf("after resume claimed %v, then nothing; want %v", got, emails)
		}
		got = append(got, c[0].ID)
	}
	for i := range emails {
		if got[i] != emails[i] {
			t.Fatalf("after resume claimed %v, want the enqueue order %v", got, emails)
		}
	}
}

func TestPauseTypeUnknownOrInvalid(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	_, err := jobs.PauseType(ctx, pool, "nope")
	testdb.WantCode(t, err, runledger.CodeDefinitionMissing)
	_, err = jobs.ResumeType(ctx, pool, "nope")
	testdb.WantCode(t, err, runledger.CodeDefinitionMissing)
	_, err = jobs.PauseType(ctx, pool, " ")
	testdb.WantCode(t, err, "job.job_type_blank")
}
