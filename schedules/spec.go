package schedules

import (
	"encoding/json"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
	"github.com/runledger-go/runledger/internal/validate"
)

// Missed is a schedule's policy for ticks that passed while no firer ran
// (downtime, a long pause of every worker).
type Missed string

const (
	// MissedLatest (the default) fires once, for the most recent tick
	// that is due, however late; older missed ticks are dropped.
	MissedLatest Missed = "latest"
	// MissedSkip never fires a missed tick: only a tick at most the
	// firer's Grace late fires; otherwise the cursor moves on.
	MissedSkip Missed = "skip"
	// MissedAll fires each due tick, oldest first, at most the
	// schedule's MissedMax per firing round (the most recent ones; older
	// ones are dropped).
	MissedAll Missed = "all"
)

// Limits of a schedule's settings.
const (
	// MaxNameBytes is the longest schedule name.
	MaxNameBytes = 200
	// MaxCronBytes is the longest cron expression.
	MaxCronBytes = 200
	// MaxMissedMax is the largest MissedMax.
	MaxMissedMax = 1000
	// DefaultMissedMax is MissedMax when a request leaves it zero.
	DefaultMissedMax = 10
	// MaxJitter is the largest jitter.
	MaxJitter = 24 * time.Hour
	// PayloadKey is the key the fired job's payload gets: an object
	// {"name": the schedule's name, "tick": the tick in RFC 3339 UTC}. A
	// schedule's own payload may not use it.
	PayloadKey = "schedule"
)

// Error codes of this package.
const (
	CodeNotFound        runledger.Code = "schedule.not_found"
	CodeNameInvalid     runledger.Code = "schedule.name_invalid"
	CodeCronInvalid     runledger.Code = "schedule.cron_invalid"
	CodeTimezoneInvalid runledger.Code = "schedule.timezone_invalid"
	CodeJobTypeInvalid  runledger.Code = "schedule.job_type_invalid"
	CodePayloadInvalid  runledger.Code = "schedule.payload_invalid"
	CodeJitterInvalid   runledger.Code = "schedule.jitter_invalid"
	CodeMissedInvalid   runledger.Code = "schedule.missed_invalid"
	CodeLimitInvalid    runledger.Code = "schedule.limit_invalid"
	// CodeUnsupportedIsolation: UpsertTx in a transaction that is not
	// read-write READ COMMITTED.
	CodeUnsupportedIsolation runledger.Code = "schedule.unsupported_isolation"
)

var (
	errNotFound = errs.Kind{Code: CodeNotFound, Category: runledger.CategoryNotFound, Message: "Schedule not found."}
	errName     = errs.Validation(CodeNameInvalid,
		"Schedule name must be non-blank UTF-8 without NUL bytes, at most 200 bytes.")
	errCron = errs.Validation(CodeCronInvalid,
		"Cron expression must have five fields, or six with seconds first, and fire at some time.")
	errTimezone = errs.Validation(CodeTimezoneInvalid, "Time zone must be an IANA zone name such as UTC or Europe/Berlin.")
	errJobType  = errs.Validation(CodeJobTypeInvalid,
		"Job type must be non-blank UTF-8 without NUL bytes, at most 255 bytes.")
	errPayload = errs.Validation(CodePayloadInvalid,
		"Schedule payload must be a JSON object without a \"schedule\" key, at most 1 MiB.")
	errJitter = errs.Validation(CodeJitterInvalid, "Jitter must be whole seconds from 0 to 24h.")
	errMissed = errs.Validation(CodeMissedInvalid,
		"Missed policy must be latest, skip or all, and missed max from 1 to 1000.")
	errLimit                = errs.Validation(CodeLimitInvalid, "Limit must be between 1 and 1000.")
	errUnsupportedIsolation = errs.Validation(CodeUnsupportedIsolation,
		"Schedule upsert requires a read-write READ COMMITTED transaction.")
)

// parser reads five fields (minute hour day-of-month month day-of-week) or
// six with seconds first. Descriptors (@hourly, @every 5m) are not
// accepted: the contract names fields only.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// never is the cursor of a schedule whose expression has no tick left
// (robfig/cron gives up after five years of search): far enough that no
// firer reaches it.
var never = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// spec is a parsed expression in its zone.
type spec struct{ s *cron.SpecSchedule }

// parseSpec parses expr in the zone named tz ("" is UTC). A TZ= or
// CRON_TZ= prefix is refused (the zone is its own setting), as are
// "Local" (the machine's zone would differ between firers) and an
// expression that never fires.
func parseSpec(expr, tz string) (spec, error) {
	if tz == "" {
		tz = "UTC"
	}
	if validate.Text(expr, MaxCronBytes) != validate.OK {
		return spec{}, errCron.Newf("cron expression of %d bytes is blank, unclean or too long", len(expr))
	}
	t := strings.TrimSpace(expr)
	if strings.HasPrefix(t, "TZ=") || strings.HasPrefix(t, "CRON_TZ=") || strings.HasPrefix(t, "@") {
		return spec{}, errCron.Newf("cron expression %q: zones and descriptors are not accepted", expr)
	}
	if tz == "Local" || !validate.Clean(tz) {
		return spec{}, errTimezone.Newf("time zone %q is not accepted", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return spec{}, errTimezone.Newf("time zone %q: %v", tz, err)
	}
	parsed, err := parser.Parse(t)
	if err != nil {
		return spec{}, errCron.Newf("cron expression %q: %v", expr, err)
	}
	s, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return spec{}, errCron.Newf("cron expression %q is not a field expression", expr)
	}
	s.Location = loc
	out := spec{s}
	if out.next(time.Now()).Equal(never) {
		return spec{}, errCron.Newf("cron expression %q never fires", expr)
	}
	return out, nil
}

// starBit marks a robfig/cron field written as "*".
const starBit = 1 << 63

// next is the first tick strictly after t (never when there is none), in
// UTC, whole seconds. When the zone's clocks go back and an hour occurs
// twice, a tick of an expression with a fixed hour field fires in the
// first occurrence only (like cron: "30 2 * * *" once, not at 02:30
// summer time and again at 02:30 winter time); an hour field of "*"
// fires in both, every hour being wanted. A wall-clock time that does not
// exist (clocks going forward) is skipped that day.
func (s spec) next(t time.Time) time.Time {
	for {
		n := s.s.Next(t)
		if n.IsZero() {
			return never
		}
		if s.s.Hour&starBit == 0 && repeatedWallClock(n, s.s.Location) {
			t = n
			continue
		}
		return n.UTC()
	}
}

// repeatedWallClock reports whether n's wall-clock time in loc already
// occurred one hour earlier: n lies in the second pass of an hour the
// clocks went back over.
func repeatedWallClock(n time.Time, loc *time.Location) bool {
	a, b := n.In(loc), n.Add(-time.Hour).In(loc)
	return a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second()
}

// atOrAfter is the first tick at or after t.
func (s spec) atOrAfter(t time.Time) time.Time { return s.next(t.Add(-time.Nanosecond)) }

// lastTicks returns the newest k ticks in [from, to], oldest first. It
// looks back from to in windows that double until one holds k ticks or
// reaches from, so a schedule with many ticks missed (a per-second
// schedule after a day of downtime) costs about the ticks it returns, not
// every tick since from.
func (s spec) lastTicks(from, to time.Time, k int) []time.Time {
	if to.Before(from) || k <= 0 {
		return nil
	}
	for d := time.Second; ; d *= 2 {
		start := to.Add(-d)
		if !start.After(from) {
			start = from
		}
		ring := make([]time.Time, 0, k)
		for t := s.atOrAfter(start); !t.After(to); t = s.next(t) {
			if len(ring) == k {
				ring = append(ring[1:], t)
			} else {
				ring = append(ring, t)
			}
		}
		if len(ring) == k || start.Equal(from) {
			return ring
		}
	}
}

// jitterOf is the delay of a fired job after its tick: a fixed fraction
// of jitter chosen by the schedule's name and tick (FNV-1a), whole
// seconds from 0 to jitter, so that a retried fire asks for the same job.
func jitterOf(name string, tick time.Time, jitter int32) time.Duration {
	if jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte(tick.UTC().Format(time.RFC3339)))
	return time.Duration(h.Sum64()%uint64(jitter+1)) * time.Second
}

// firedPayload is the schedule's payload with PayloadKey added.
func firedPayload(payload json.RawMessage, name string, tick time.Time) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &obj); err != nil {
			return nil, errs.Invariantf("schedule %q payload is not an object: %v", name, err)
		}
	}
	mark, err := json.Marshal(map[string]string{"name": name, "tick": tick.UTC().Format(time.RFC3339)})
	if err != nil {
		return nil, errs.Invariant("encode schedule mark: " + err.Error())
	}
	obj[PayloadKey] = mark
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, errs.Invariant("encode fired payload: " + err.Error())
	}
	return out, nil
}

// IdempotencyKey is the key of the job a schedule's tick fires:
// "schedule:NAME:TICK", TICK in RFC 3339 UTC.
func IdempotencyKey(name string, tick time.Time) string {
	return "schedule:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

func validateName(name string) error {
	if validate.Text(name, MaxNameBytes) != validate.OK {
		return errName.Newf("schedule name of %d bytes is blank, unclean or too long", len(name))
	}
	return nil
}

func validatePayload(p json.RawMessage) error {
	if p == nil {
		return nil
	}
	if len(p) > runledger.DefaultMaxJSONBytes {
		return errPayload.Newf("payload of %d bytes is over %d", len(p), runledger.DefaultMaxJSONBytes)
	}
	if err := validate.JSONB(p); err != nil {
		return errPayload.Newf("payload: %v", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(p, &obj); err != nil || obj == nil {
		return errPayload.New("payload is not a JSON object")
	}
	if _, ok := obj[PayloadKey]; ok {
		return errPayload.Newf("payload uses the reserved key %q", PayloadKey)
	}
	return nil
}
