package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runledger-go/runledger/internal/errs"
)

// commands is the registry of runledger commands, in the order `runledger
// help` lists them; newRoot turns it into the cobra command tree. Adding a
// command is a new file defining a *command and one line here (then go
// generate ./cmd/runledger rewrites docs/CLI-REFERENCE.md). In that file:
//
//   - setup defines the command's flags with the flagSet helpers on the
//     command's pflag set (their usage text starts with a `PLACEHOLDER`;
//     help is generated from it) and returns the run function;
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

// The commands are listed in the registry's order, not sorted. cobra reads
// this package-level setting; it is set once here, because tests run the
// command line from parallel goroutines.
func init() { cobra.EnableCommandSorting = false }

// newRoot builds the cobra command tree of the registry: a group command
// for the first word of multi-word commands, a leaf per command. Each leaf
// parses its flags with pflag (on the arguments normalizeArgs rewrote),
// checks the required flags and the argument count, and then calls
// leaf(c, pos, run) to run it. The root's persistent flags are the
// global --json, --database-url and -h/--help.
func newRoot(leaf func(cmd *command, pos []string, run runFunc) error) (*cobra.Command, *bool, *string) {
	root := &cobra.Command{
		Use:           "runledger",
		Short:         "runledger: a durable job ledger on PostgreSQL, with compare-and-replay of succeeded jobs.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.SetHelpCommand(&cobra.Command{Hidden: true, Use: "no-help"}) // `help` is dispatched by run
	global := wrapFlagSet(root.PersistentFlags())
	asJSON, url := defineGlobalFlags(global, false, "")
	root.PersistentFlags().BoolP("help", "h", false, "Show this help.")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return flagError(commandName(c), err)
	})
	parents := map[string]*cobra.Command{}
	for _, cmd := range commands {
		parent := root
		words := cmd.words()
		if len(words) > 1 {
			parent = parents[words[0]]
			if parent == nil {
				parent = &cobra.Command{Use: words[0], Short: groups[words[0]], Args: cobra.ArbitraryArgs}
				parents[words[0]] = parent
				root.AddCommand(parent)
			}
		}
		c := &cobra.Command{
			Short:                 cmd.summary,
			Long:                  cmd.help,
			Args:                  cobra.ArbitraryArgs,
			DisableFlagsInUseLine: true,
			Annotations:           map[string]string{annotationArgs: cmd.args},
		}
		fs := wrapFlagSet(c.Flags())
		run := cmd.setup(fs)
		c.Use = words[len(words)-1] + strings.TrimPrefix(synopsis(cmd, fs), "runledger "+cmd.name)
		c.RunE = func(c *cobra.Command, pos []string) error {
			if err := fs.checkRequired(cmd.name); err != nil {
				return err
			}
			if err := checkArgs(cmd, pos); err != nil {
				return err
			}
			return leaf(cmd, pos, run)
		}
		parent.AddCommand(c)
	}
	return root, asJSON, url
}

// annotationArgs is the cobra annotation holding a command's synopsis of
// positional arguments (command.args).
const annotationArgs = "runledger_args"

// commandName is the words that select c: "migrate up".
func commandName(c *cobra.Command) string {
	return strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), "runledger"), " ")
}

// find returns the command of the tree named by the leading words of args,
// with the remaining arguments. When args name no command it returns a
// usage error; group is set when args[0] is a group (so the caller can
// offer the group's help).
func find(root *cobra.Command, args []string) (c *cobra.Command, rest []string, group *cobra.Command, err error) {
	if len(args) == 0 {
		return nil, nil, nil, usageErrorf("missing command")
	}
	c = child(root, args[0])
	if c == nil {
		return nil, nil, nil, usageErrorf("unknown command %q; run 'runledger help' for the list", args[0])
	}
	if !c.HasSubCommands() {
		return c, args[1:], nil, nil
	}
	var subs []string
	for _, s := range c.Commands() {
		subs = append(subs, s.Name())
	}
	want := strings.Join(subs, ", ")
	if len(args) == 1 || strings.HasPrefix(args[1], "-") {
		return nil, nil, c, usageErrorf("%s: missing subcommand; want one of: %s", args[0], want)
	}
	if s := child(c, args[1]); s != nil {
		return s, args[2:], nil, nil
	}
	return nil, nil, c, usageErrorf("%s: unknown subcommand %q; want one of: %s", args[0], args[1], want)
}

// child returns the subcommand of c named name, or nil.
func child(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name && !s.Hidden {
			return s
		}
	}
	return nil
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

// usageErrorf returns a usage error (exit 2): an unknown command or flag,
// a missing flag or argument, an unexpected argument.
func usageErrorf(format string, args ...any) error {
	return errs.Validation(codeUsage, fmt.Sprintf(format, args...)).New("")
}
