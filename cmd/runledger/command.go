package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/runledger-go/runledger/internal/errs"
)

// commands is the registry of runledger commands, in the order `runledger
// help` lists them. Adding a command is a new file defining a *command and
// one line here. In that file:
//
//   - setup defines the command's flags with the flagSet helpers (their
//     usage text starts with a `PLACEHOLDER`; help is generated from it)
//     and returns the run function;
//   - run validates its input, then calls inv.Pool (or inv.SQLDB), where
//     database work starts (validatedCall does both for a library request),
//     and returns a result (JSON-encodable, with a text method for the
//     human form) or an error, mapped to an exit code by exitCode;
//   - a command that must work on a fresh machine without a configured
//     database (like demo) gets one from openScratchDatabase, which uses
//     the configured database or starts a throwaway server, and must Close
//     it; ctx is cancelled on SIGINT or SIGTERM.
var commands = []*command{
	migrateUpCmd,
	migrateDownCmd,
	migrateStatusCmd,
	migrateVersionCmd,
	definitionsUpsertCmd,
	definitionsPauseCmd,
	definitionsResumeCmd,
	enqueueCmd,
	enqueueBulkCmd,
	claimCmd,
	completeCmd,
	failCmd,
	replayCmd,
	replayBulkCmd,
	requeueCmd,
	requeueBulkCmd,
	jobsShowCmd,
	schedulesUpsertCmd,
	schedulesListCmd,
	schedulesShowCmd,
	schedulesPauseCmd,
	schedulesResumeCmd,
	schedulesDeleteCmd,
	demoCmd,
	statsCmd,
	pruneCmd,
	uiCmd,
}

// groups describes the first word of multi-word commands ("migrate up"):
// `runledger help migrate` prints the text and the group's commands.
var groups = map[string]string{
	"migrate":     "Apply, roll back and inspect the database schema (the goose migrations embedded in the binary).",
	"definitions": "Manage job types: the defaults and the enabled switch every job of a type starts from, and pausing its claims.",
	"jobs":        "Read jobs: a job's record, history and replay lineage.",
	"schedules":   "Manage schedules: cron expressions whose ticks the workers enqueue as jobs.",
}

// A command is one runledger command: the words that select it, its
// documentation, its flags and the function that runs it.
type command struct {
	// name is the words that select the command: "enqueue", "migrate up".
	name string
	// args is the synopsis of the positional arguments ("UUID"), one word
	// per argument; "" for none. The dispatcher enforces the count.
	args string
	// summary is the one-line description in the command list.
	summary string
	// help is the long description `runledger help <name>` prints before
	// the flags: what the command does, its output and its exit codes.
	help string
	// setup defines the command's own flags on fs (the global --json and
	// --database-url are already there) and returns the function that
	// runs the command once the arguments are parsed and counted.
	setup func(fs *flagSet) runFunc
}

// runFunc runs a command. It must check everything it can about its input
// before its first call to inv.Pool or inv.SQLDB, which is where database
// work starts: bad input exits 2 without touching the database. It returns
// the result to print, or an error (see exitCode for the mapping).
type runFunc func(ctx context.Context, inv *invocation) (result, error)

// result is what a command prints: json.Marshal of the value with --json,
// text otherwise. A result that implements exitCoder ends the process with
// that code instead of 0 (a replay outcome other than replayed).
type result interface {
	text(w io.Writer)
}

// exitCoder is implemented by results that are not plain success.
type exitCoder interface {
	exitCode() int
}

// words returns the command's name split into words.
func (c *command) words() []string { return strings.Fields(c.name) }

// nargs is the number of positional arguments the command takes.
func (c *command) nargs() int { return len(strings.Fields(c.args)) }

// lookup finds the command named by the leading words of args and returns
// it with the remaining arguments. When args name no command it returns
// nil and a usage error; group is set when args[0] is a group name (so the
// caller can offer the group's help).
func lookup(args []string) (cmd *command, rest []string, group string, err error) {
	if len(args) == 0 {
		return nil, nil, "", usageErrorf("missing command")
	}
	var best *command
	for _, c := range commands {
		w := c.words()
		if len(w) <= len(args) && equalWords(w, args[:len(w)]) && (best == nil || len(w) > len(best.words())) {
			best = c
		}
	}
	if best != nil {
		return best, args[len(best.words()):], "", nil
	}
	if _, ok := groups[args[0]]; ok {
		subs := strings.Join(subcommands(args[0]), ", ")
		if len(args) == 1 || strings.HasPrefix(args[1], "-") {
			return nil, nil, args[0], usageErrorf("%s: missing subcommand; want one of: %s", args[0], subs)
		}
		return nil, nil, args[0], usageErrorf("%s: unknown subcommand %q; want one of: %s", args[0], args[1], subs)
	}
	return nil, nil, "", usageErrorf("unknown command %q; run 'runledger help' for the list", args[0])
}

// subcommands returns the second words of the commands in group.
func subcommands(group string) []string {
	var out []string
	for _, c := range commands {
		if w := c.words(); len(w) > 1 && w[0] == group {
			out = append(out, w[1])
		}
	}
	return out
}

func equalWords(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// usageErrorf returns a usage error (exit 2): an unknown command or flag,
// a missing flag or argument, an unexpected argument.
func usageErrorf(format string, args ...any) error {
	return errs.Validation(codeUsage, fmt.Sprintf(format, args...)).New("")
}
