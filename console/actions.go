package console

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/inspect"
	"github.com/runledger-go/runledger/jobs"
	"github.com/runledger-go/runledger/replay"
	"github.com/runledger-go/runledger/requeue"
)

// The single actions: each is the library's compare-and-set on what the
// page showed (the job's status and run, carried in the form), records the
// operator, and answers with the job page as it is after the action, its
// outcome announced in the role="status" element. A mismatch writes
// nothing and shows the job as it is now (409).

// outcome is an action's announcement, with a link to what it made.
type outcome struct {
	Text     string
	Link     string
	LinkText string
}

// actionTarget reads what every single-job action starts from: the job
// id of the path, the run the form carries (what the page showed) and the
// job's scope. When it cannot (an incomplete form: 400; a job outside the
// console's reach: its error page) it has answered, and ok is false.
func (c *console) actionTarget(w http.ResponseWriter, r *http.Request) (id uuid.UUID, run int32, scope runledger.Scope, ok bool) {
	id, idErr := uuid.Parse(r.PathValue("id"))
	run64, runErr := strconv.ParseInt(r.PostFormValue("run"), 10, 32)
	if idErr != nil || runErr != nil {
		c.render(w, r, http.StatusBadRequest, "error", "The form is incomplete: reload the job page.")
		return uuid.Nil, 0, scope, false
	}
	scope, err := c.scopeOf(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return uuid.Nil, 0, scope, false
	}
	return id, int32(run64), scope, true
}

// answer shows the job page as it is now with the action's outcome.
func (c *console) answer(w http.ResponseWriter, r *http.Request, code int, id uuid.UUID, o outcome) {
	v, err := c.loadJob(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.renderOutcome(w, r, code, "job", o, v)
}

// refused answers a request the library refused without writing: a
// validation error is shown on the job page (400), anything else as an
// error page.
func (c *console) refused(w http.ResponseWriter, r *http.Request, id uuid.UUID, err error) {
	var e *runledger.Error
	if errors.As(err, &e) && e.Category == runledger.CategoryValidation {
		c.answer(w, r, http.StatusBadRequest, id, outcome{Text: "Nothing was done: " + e.Message})
		return
	}
	c.fail(w, r, err)
}

func mismatch(actual runledger.Job) outcome {
	return outcome{Text: fmt.Sprintf("Nothing was done: the job changed since the page was shown. It is now %s at run %d (shown below).",
		actual.Status, actual.RunNumber)}
}

// replayAction replays the job if it is still SUCCEEDED at the run the
// page showed, under the form's key and reason.
func (c *console) replayAction(w http.ResponseWriter, r *http.Request) {
	id, run, scope, ok := c.actionTarget(w, r)
	if !ok {
		return
	}
	out, err := replay.SucceededJob(r.Context(), c.pool, replay.Request{
		Scope: scope, SourceJobID: id, ExpectedRunNumber: run,
		Key: r.PostFormValue("key"), Reason: r.PostFormValue("reason"), Operator: operatorOf(r.Context()),
	})
	if err != nil {
		c.refused(w, r, id, err)
		return
	}
	switch o := out.(type) {
	case replay.Replayed:
		text := "Replayed: a new job was enqueued."
		if o.Disposition == runledger.DispositionExisting {
			text = "Already replayed with this key and reason: nothing new was enqueued."
		}
		c.answer(w, r, http.StatusOK, id, outcome{Text: text, Link: c.link("/jobs/" + o.Replay.JobID.String()),
			LinkText: "Open replay " + o.Replay.JobID.String()})
	case replay.ExpectationMismatch:
		c.answer(w, r, http.StatusConflict, id, mismatch(o.Actual))
	case replay.NotFound:
		c.notFound(w, r)
	}
}

// requeueAction requeues the job if it is still in the status and run the
// page showed.
func (c *console) requeueAction(w http.ResponseWriter, r *http.Request) {
	id, run, scope, ok := c.actionTarget(w, r)
	if !ok {
		return
	}
	policy := requeue.PreserveProgress
	if r.PostFormValue("reset_progress") != "" {
		policy = requeue.ResetProgress
	}
	out, err := requeue.Job(r.Context(), c.pool, requeue.Request{
		Scope: scope, JobID: id, ExpectedStatus: requeue.Status(r.PostFormValue("status")), ExpectedRunNumber: run,
		StatePolicy: policy, Reason: r.PostFormValue("reason"), Operator: operatorOf(r.Context()),
	})
	if err != nil {
		c.refused(w, r, id, err)
		return
	}
	switch o := out.(type) {
	case requeue.Requeued:
		text := fmt.Sprintf("Requeued: the job is PENDING at run %d.", o.After.RunNumber)
		if o.Disposition == runledger.DispositionExisting {
			text = "Already requeued with this reason: nothing was done again."
		}
		c.answer(w, r, http.StatusOK, id, outcome{Text: text})
	case requeue.ExpectationMismatch:
		c.answer(w, r, http.StatusConflict, id, mismatch(o.Actual))
	case requeue.NotQuiesced:
		c.answer(w, r, http.StatusConflict, id, outcome{Text: fmt.Sprintf(
			"Nothing was done: the canceled attempt's lease runs until %s and its worker may still be running it; try again after it.",
			formatTime(o.RetryAfter))})
	case requeue.NotFound:
		c.notFound(w, r)
	}
}

// cancelAction cancels the job if it is still in the status and run the
// page showed and has not finished.
func (c *console) cancelAction(w http.ResponseWriter, r *http.Request) {
	id, run, scope, ok := c.actionTarget(w, r)
	if !ok {
		return
	}
	// The library's cancel compares the status (unfinished) itself; the
	// run and exact status the page showed are compared here first.
	now, err := inspect.Get(r.Context(), c.pool, scope, id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if string(now.Status) != r.PostFormValue("status") || now.RunNumber != run {
		c.answer(w, r, http.StatusConflict, id, mismatch(now))
		return
	}
	job, err := jobs.Cancel(r.Context(), c.pool, jobs.CancelRequest{
		Scope: scope, JobID: id, Reason: r.PostFormValue("reason"), Operator: operatorOf(r.Context()),
	})
	switch {
	case errors.Is(err, runledger.CodeNotCancelable):
		now, err := inspect.Get(r.Context(), c.pool, scope, id)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		c.answer(w, r, http.StatusConflict, id, mismatch(now))
	case err != nil:
		c.refused(w, r, id, err)
	default:
		c.answer(w, r, http.StatusOK, id, outcome{Text: fmt.Sprintf("Canceled at run %d.", job.RunNumber)})
	}
}

// typeAction pauses or resumes a job type ("/types/{type}/pause" or
// "/resume") and shows the overview with the type's state as the
// definition now stores it (the overview's other figures are the cached
// Stats read). A pause stops every tenant's claims of the type, so a
// console scoped to one tenant refuses it (403). The operator is logged:
// a definition has no history of its own to record it in.
func (c *console) typeAction(w http.ResponseWriter, r *http.Request) {
	change := r.PathValue("change")
	if change != "pause" && change != "resume" {
		c.render(w, r, http.StatusNotFound, "error", "No such page.")
		return
	}
	if c.opts.Scope != nil {
		c.render(w, r, http.StatusForbidden, "error",
			"This console is limited to one tenant; pausing a job type stops it for every tenant.")
		return
	}
	jobType := r.PathValue("type")
	set := jobs.PauseType
	if change == "resume" {
		set = jobs.ResumeType
	}
	def, err := set(r.Context(), c.pool, jobType)
	if err != nil {
		var e *runledger.Error
		if errors.As(err, &e) && e.Category == runledger.CategoryNotFound {
			c.render(w, r, http.StatusNotFound, "error", "No such job type.")
			return
		}
		c.fail(w, r, err)
		return
	}
	c.log.Info("console: job type "+change+"d", "job_type", def.JobType, "paused", def.Paused, "operator", operatorOf(r.Context()))
	st, err := c.stats.Stats(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	types := slices.Clone(st.Types)
	for i := range types {
		if types[i].JobType == def.JobType {
			types[i].Paused = def.Paused
		}
	}
	st.Types = types
	text := fmt.Sprintf("Job type %s is paused: workers stop claiming it within one poll interval; its jobs stay PENDING and enqueues are accepted.", def.JobType)
	if !def.Paused {
		text = fmt.Sprintf("Job type %s is resumed: workers claim its due jobs again.", def.JobType)
	}
	c.renderOutcome(w, r, http.StatusOK, "overview", outcome{Text: text}, overviewView{Stats: st})
}
