package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	"github.com/runledger-go/runledger"
	"github.com/runledger-go/runledger/internal/errs"
)

// Error codes of the command line itself, all category validation (exit
// 2). Errors from the library keep their own codes.
const (
	// codeUsage: an unknown command, subcommand or flag, a missing
	// required flag or argument, or an unexpected argument.
	codeUsage runledger.Code = "cli.usage"
	// codeInvalidArgument: a flag or argument value that does not parse
	// (a UUID, an integer, JSON, a duration, a boolean).
	codeInvalidArgument = "cli.invalid_argument"
	// codeDatabaseURLMissing: neither --database-url nor DATABASE_URL.
	codeDatabaseURLMissing = "cli.database_url_missing"
	// codeDatabaseURLInvalid: a database URL that does not parse.
	codeDatabaseURLInvalid = "cli.database_url_invalid"
)

// flagSet is the pflag.FlagSet of one cobra command with what help and
// validation need beyond it: the order flags were defined in, which flags
// are required and which are global.
type flagSet struct {
	*pflag.FlagSet
	order    []string
	required map[string]bool
	global   map[string]bool
	// valued holds boolean flags that are spelled --name=BOOL in help:
	// leaving them out means "unchanged", not false.
	valued map[string]bool
}

func newFlagSet(name string) *flagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by the caller
	fs.Usage = func() {}
	return wrapFlagSet(fs)
}

// wrapFlagSet adds the help bookkeeping to fs (a cobra command's flags).
func wrapFlagSet(fs *pflag.FlagSet) *flagSet {
	fs.SortFlags = false
	return &flagSet{FlagSet: fs, required: map[string]bool{}, global: map[string]bool{}, valued: map[string]bool{}}
}

// define registers v under name. usage starts with the placeholder in
// backquotes (`UUID`), as pflag.UnquoteUsage expects, unless v is boolean.
func (f *flagSet) define(v pflag.Value, name, usage string) {
	fl := f.VarPF(v, name, "", usage)
	if isBoolValue(v) {
		fl.NoOptDefVal = "true"
	}
	f.order = append(f.order, name)
}

// requireFlag marks name as required: parse fails without it.
func (f *flagSet) requireFlag(name string) {
	f.required[name] = true
	_ = f.SetAnnotation(name, annotationRequired, []string{"true"})
}

// Flag annotations that help reads: a required flag, and a boolean flag
// spelled --name=BOOL.
const (
	annotationRequired = "runledger_required"
	annotationValued   = "runledger_valued"
)

// str defines a string flag.
func (f *flagSet) str(name, usage string) *string {
	v := new(stringValue)
	f.define(v, name, usage)
	return (*string)(v)
}

// list defines a string flag that may be repeated and whose values may be
// comma-separated; the result keeps every non-empty item in order.
func (f *flagSet) list(name, usage string) *[]string {
	v := new(listValue)
	f.define(v, name, usage)
	return (*[]string)(v)
}

// jobTypes defines a repeatable flag of comma-separated job types. A job
// type is taken exactly as given, as every command takes one (--type of
// enqueue, stats, the bulk commands): never trimmed, so that " email" names
// the type " email" everywhere; an item that is blank (empty after
// trimming white space) is refused, as a blank --type is everywhere.
func (f *flagSet) jobTypes(name, usage string) *[]string {
	v := new(jobTypesValue)
	f.define(v, name, usage)
	return (*[]string)(v)
}

// int32Opt defines an optional 32-bit integer flag; it stays nil unless
// given.
func (f *flagSet) int32Opt(name, usage string) **int32 {
	v := &int32Value{}
	f.define(v, name, usage)
	return &v.p
}

// int32Req defines a required 32-bit integer flag.
func (f *flagSet) int32Req(name, usage string) *int32 {
	v := &int32Value{}
	f.define(v, name, usage)
	f.requireFlag(name)
	return &v.n
}

// intDefault defines an integer flag with a default.
func (f *flagSet) intDefault(name string, def int32, usage string) *int32 {
	v := &int32Value{n: def}
	f.define(v, name, usage)
	return &v.n
}

// int64Opt defines an optional 64-bit integer flag; it stays nil unless
// given.
func (f *flagSet) int64Opt(name, usage string) **int64 {
	v := &int64Value{}
	f.define(v, name, usage)
	return &v.p
}

// uuidFlag defines a UUID flag; it stays nil unless given.
func (f *flagSet) uuidFlag(name, usage string) **uuid.UUID {
	v := &uuidValue{}
	f.define(v, name, usage)
	return &v.p
}

// jsonFlag defines a flag holding a JSON document; it stays nil unless
// given, and a value that is not valid JSON fails the parse.
func (f *flagSet) jsonFlag(name, usage string) *json.RawMessage {
	v := new(jsonValue)
	f.define(v, name, usage)
	return (*json.RawMessage)(v)
}

// duration defines a duration flag with a default.
func (f *flagSet) duration(name string, def time.Duration, usage string) *time.Duration {
	v := &durationValue{d: def}
	f.define(v, name, usage)
	return &v.d
}

// durationOpt defines an optional duration flag; it stays nil unless given.
func (f *flagSet) durationOpt(name, usage string) **time.Duration {
	v := &durationValue{}
	f.define(v, name, usage)
	return &v.p
}

// timeOpt defines an optional RFC 3339 time flag (held in UTC); it stays
// nil unless given.
func (f *flagSet) timeOpt(name, usage string) **time.Time {
	v := &timeValue{}
	f.define(v, name, usage)
	return &v.p
}

// boolean defines a boolean flag: --name means true, --name=false false.
func (f *flagSet) boolean(name string, def bool, usage string) *bool {
	v := &boolValue{b: def}
	f.define(v, name, usage)
	return &v.b
}

// boolOpt defines an optional boolean flag; it stays nil unless given.
func (f *flagSet) boolOpt(name, usage string) **bool {
	v := &boolValue{}
	f.define(v, name, usage)
	f.valued[name] = true
	_ = f.SetAnnotation(name, annotationValued, []string{"true"})
	return &v.p
}

// parse parses args as the command line does (normalizeArgs, then pflag,
// which allows positional arguments between flags: `jobs show UUID --org X`
// and `jobs show --org X UUID` both work; everything after a "--" is
// positional) and checks the required flags. It returns the positional
// arguments, pflag.ErrHelp for -h or --help, or a usage error naming cmd.
func (f *flagSet) parse(cmd string, args []string) ([]string, error) {
	if err := f.Parse(normalizeArgs(args, f.Lookup, false)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, flagError(cmd, err)
	}
	if err := f.checkRequired(cmd); err != nil {
		return nil, err
	}
	if len(f.Args()) == 0 {
		return nil, nil
	}
	return f.Args(), nil
}

// checkRequired returns a usage error naming every required flag not given,
// in the order they were defined.
func (f *flagSet) checkRequired(cmd string) error {
	var missing []string
	for _, name := range f.order {
		if f.required[name] && !f.isSet(name) {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return usageErrorf("%s: missing required flag %s", cmd, strings.Join(missing, ", "))
	}
	return nil
}

// normalizeArgs rewrites a command line into the spelling pflag reads,
// keeping every form the command line accepts: a flag may be written with
// one dash or two (-type T, --type T, -type=T), -help and --h ask for help
// like -h and --help, and a boolean flag takes "true" or "false" as the
// next argument (--enabled false), which pflag would read as a positional
// argument. lookup finds the flags of the command; the value of a flag that
// takes one is passed through untouched (--reason --json is a reason of
// "--json"). A help flag ends the command line. With untilPositional it stops rewriting at the first
// positional argument (the command name, when the flags before it are the
// global ones). Everything after "--" is positional. No command takes
// "true" or "false" as a positional argument.
func normalizeArgs(args []string, lookup func(string) *pflag.Flag, untilPositional bool) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if untilPositional {
				return append(out, args[i:]...)
			}
			out = append(out, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			// Help is asked for here: what follows is not read, as it
			// was not by the flag package (-h --colour is help,
			// --colour -h an unknown flag).
			return append(out, "--help")
		}
		spelled := "--" + name
		if hasVal {
			spelled += "=" + val
		}
		fl := lookup(name)
		switch {
		case fl == nil || hasVal || i+1 == len(args):
		case fl.NoOptDefVal != "":
			if next := args[i+1]; next == "true" || next == "false" {
				spelled += "=" + next
				i++
			}
		default:
			out = append(out, spelled)
			spelled = args[i+1]
			i++
		}
		out = append(out, spelled)
	}
	return out
}

func (f *flagSet) isSet(name string) bool { return f.Changed(name) }

// flagError rewrites pflag's errors in the command line's words. A value
// that did not parse is cli.invalid_argument; anything else is cli.usage.
func flagError(cmd string, err error) error {
	msg := err.Error()
	code := codeUsage
	var (
		notExist *pflag.NotExistError
		noValue  *pflag.ValueRequiredError
		invalid  *pflag.InvalidValueError
	)
	switch {
	case errors.As(err, &notExist):
		msg = "unknown flag " + dashes(notExist.GetSpecifiedName())
	case errors.As(err, &noValue):
		msg = "flag " + dashes(noValue.GetSpecifiedName()) + " needs a value"
	case errors.As(err, &invalid):
		code = codeInvalidArgument
		what := "value"
		if isBoolValue(invalid.GetFlag().Value) {
			what = "boolean value"
		}
		msg = fmt.Sprintf("invalid %s %q for --%s: %v", what, invalid.GetValue(), invalid.GetFlag().Name, errors.Unwrap(invalid))
	}
	return errs.Validation(code, cmd+": "+msg).New("")
}

// dashes spells a flag as --name whatever the user typed.
func dashes(s string) string { return "--" + strings.TrimLeft(s, "-") }

// isBoolValue reports whether v is a boolean flag's value.
func isBoolValue(v pflag.Value) bool {
	b, ok := v.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// invalidArgf returns a cli.invalid_argument error (exit 2).
func invalidArgf(format string, args ...any) error {
	return errs.Validation(codeInvalidArgument, fmt.Sprintf(format, args...)).New("")
}

// wantsJSON reports whether args ask for --json, looking at every argument
// before a "--". The dispatcher uses it to print errors found before (or
// instead of) a successful parse in the requested form.
func wantsJSON(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		if !hasVal {
			on = true
			continue
		}
		if b, err := strconv.ParseBool(val); err == nil {
			on = b
		}
	}
	return on
}

// Flag values. Each Set error becomes "invalid value "x" for --name: <error>".

type stringValue string

func (s *stringValue) String() string     { return string(*s) }
func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }

type listValue []string

func (l *listValue) String() string { return strings.Join(*l, ",") }
func (l *listValue) Set(v string) error {
	n := len(*l)
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	if len(*l) == n {
		return errors.New("must name at least one value")
	}
	return nil
}

type jobTypesValue []string

func (l *jobTypesValue) String() string { return strings.Join(*l, ",") }
func (l *jobTypesValue) Set(v string) error {
	for i, item := range strings.Split(v, ",") {
		if strings.TrimSpace(item) == "" {
			return fmt.Errorf("item %d of %s is blank: want job types separated by commas, each taken exactly as given", i+1, clip(v))
		}
		*l = append(*l, item)
	}
	return nil
}

type int32Value struct {
	n int32
	p *int32
}

func (v *int32Value) String() string {
	if v == nil {
		return "0"
	}
	return strconv.FormatInt(int64(v.n), 10)
}

func (v *int32Value) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return errors.New("must be an integer between -2147483648 and 2147483647")
		}
		return errors.New("must be an integer")
	}
	v.n = int32(n)
	v.p = &v.n
	return nil
}

type int64Value struct {
	n int64
	p *int64
}

func (v *int64Value) String() string {
	if v == nil {
		return "0"
	}
	return strconv.FormatInt(v.n, 10)
}

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return errors.New("must be an integer")
	}
	v.n = n
	v.p = &v.n
	return nil
}

type uuidValue struct{ p *uuid.UUID }

func (v *uuidValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v *uuidValue) Set(s string) error {
	id, err := uuid.Parse(strings.TrimSpace(s))
	if err != nil {
		return errors.New("must be a UUID such as 0193a6b2-7c1e-7d3a-9f00-2b1c3d4e5f60")
	}
	v.p = &id
	return nil
}

type jsonValue json.RawMessage

func (v *jsonValue) String() string { return string(*v) }

func (v *jsonValue) Set(s string) error {
	if !json.Valid([]byte(s)) {
		return fmt.Errorf("not valid JSON%s", jsonProblem(s))
	}
	*v = jsonValue(s)
	return nil
}

// jsonProblem says where decoding s fails, for the error message.
func jsonProblem(s string) string {
	var x any
	err := json.Unmarshal([]byte(s), &x)
	if err == nil || strings.TrimSpace(s) == "" {
		return " (empty)"
	}
	return " (" + err.Error() + ")"
}

type durationValue struct {
	d time.Duration
	p *time.Duration
}

func (v *durationValue) String() string {
	if v == nil {
		return "0s"
	}
	return v.d.String()
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errors.New("must be a duration such as 30s, 5m or 1h30m")
	}
	v.d = d
	v.p = &v.d
	return nil
}

type timeValue struct{ p *time.Time }

func (v *timeValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return v.p.Format(time.RFC3339Nano)
}

func (v *timeValue) Set(s string) error {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return errors.New("must be an RFC 3339 time such as 2026-11-30T09:00:00Z or 2026-11-30T10:00:00+01:00")
	}
	t = t.UTC()
	// RFC 3339 writes years 0000 to 9999, and PostgreSQL has no year 0: a
	// time outside years 1 to 9999 in UTC could be neither stored as given
	// nor printed back.
	if y := t.Year(); y < 1 || y > 9999 {
		return errors.New("must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z in UTC")
	}
	v.p = &t
	return nil
}

type boolValue struct {
	b bool
	p *bool
}

func (v *boolValue) IsBoolFlag() bool { return true }

func (v *boolValue) String() string {
	if v == nil {
		return "false"
	}
	return strconv.FormatBool(v.b)
}

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("must be true or false")
	}
	v.b = b
	v.p = &v.b
	return nil
}

// Type names the kind of value in pflag's terms.
func (s *stringValue) Type() string   { return "string" }
func (l *listValue) Type() string     { return "strings" }
func (l *jobTypesValue) Type() string { return "types" }
func (v *int32Value) Type() string    { return "int32" }
func (v *int64Value) Type() string    { return "int64" }
func (v *uuidValue) Type() string     { return "uuid" }
func (v *jsonValue) Type() string     { return "json" }
func (v *durationValue) Type() string { return "duration" }
func (v *timeValue) Type() string     { return "time" }
func (v *boolValue) Type() string     { return "bool" }
