package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The help of runledger, of a group and of each command is generated from
// the cobra tree newRoot builds: the commands' Use, Short and Long, and
// their flags with the usage text and annotations the flagSet helpers
// give them.

// helpCommand is `runledger help [command words]`.
func helpCommand(root *cobra.Command, stdout, stderr io.Writer, asJSON bool, args []string) int {
	var words []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
		}
	}
	if len(words) == 0 {
		return printHelp(stdout, asJSON, root)
	}
	c, rest, group, err := find(root, words)
	if err != nil {
		if group != nil && len(words) == 1 {
			return printHelp(stdout, asJSON, group)
		}
		writeError(stderr, asJSON, "help", err)
		return exitUsage
	}
	if len(rest) > 0 {
		writeError(stderr, asJSON, "help", usageErrorf("unknown %s subcommand %q", commandName(c), rest[0]))
		return exitUsage
	}
	return printHelp(stdout, asJSON, c)
}

// printHelp prints the help of c (the root, a group or a command) on
// stdout and returns exit code 0. With --json the text is the value of
// {"help": ...}.
func printHelp(w io.Writer, asJSON bool, c *cobra.Command) int {
	text := helpText(c)
	if asJSON {
		writeJSON(w, map[string]string{"help": text})
	} else {
		_, _ = io.WriteString(w, text)
	}
	return exitOK
}

// helpText is the help of c: the overview for the root, the list of
// subcommands for a group, usage and flags for a command.
func helpText(c *cobra.Command) string {
	var b bytes.Buffer
	switch {
	case !c.HasParent():
		overview(&b, c)
	case c.HasSubCommands():
		groupHelp(&b, c)
	default:
		commandHelp(&b, c)
	}
	return b.String()
}

// leaves returns the runnable commands under c in the order they were
// added (the registry's).
func leaves(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		switch {
		case s.Hidden:
		case s.HasSubCommands():
			out = append(out, leaves(s)...)
		default:
			out = append(out, s)
		}
	}
	return out
}

// listCommands prints one row per command: its words and positional
// arguments, and its summary.
func listCommands(w io.Writer, cmds []*cobra.Command, extra ...string) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range cmds {
		name := commandName(c)
		if args := c.Annotations[annotationArgs]; args != "" {
			name += " " + args
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, c.Short)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		fmt.Fprintf(tw, "  %s\t%s\n", extra[i], extra[i+1])
	}
	_ = tw.Flush()
}

func overview(w io.Writer, root *cobra.Command) {
	fmt.Fprintf(w, `%s

Usage:
  runledger <command> [flags]
  runledger help <command>      (or: runledger <command> --help)

Commands:
`, root.Short)
	listCommands(w, leaves(root), "help [command]", "Show help for runledger or one command.")
	fmt.Fprint(w, `
Every command accepts:
  --database-url URL   PostgreSQL connection URL; default: the DATABASE_URL environment variable.
  --json               Print exactly one JSON object on stdout; errors go to stderr as
                       {"error":{"code","category","message"}}.

`)
	fmt.Fprint(w, exitCodesText)
}

// exitCodesText is the exit code table shared by the overview.
const exitCodesText = `Exit codes:
  0  done
  1  other error: database unreachable, transient or internal failure, interrupted
  2  usage or validation error (bad flag or value, missing database URL, invalid request)
  3  expectation mismatch (replay: the job is not SUCCEEDED at --run; complete/fail: the lease is not held)
  4  not found in the caller's scope
  5  conflict with stored state (replay key reused with another reason, idempotency key reused)
  6  replay-bulk: at least one selected source was refused (the others are replayed)
`

func groupHelp(w io.Writer, group *cobra.Command) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  runledger %s <subcommand> [flags]\n\nSubcommands:\n", group.Short, group.Name())
	listCommands(w, leaves(group))
	fmt.Fprintf(w, "\nRun 'runledger help %s <subcommand>' for a subcommand's flags and output.\n", group.Name())
}

func commandHelp(w io.Writer, c *cobra.Command) {
	fmt.Fprintf(w, "Usage:\n  %s\n\n%s\n", c.UseLine(), strings.TrimSpace(c.Short))
	if h := strings.TrimSpace(c.Long); h != "" {
		fmt.Fprintf(w, "\n%s\n", h)
	}
	// Flags in the order they were defined: cobra's derived flag sets
	// (LocalFlags, InheritedFlags) sort them.
	global := c.Root().PersistentFlags()
	var own []*pflag.Flag
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if global.Lookup(f.Name) == nil {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		writeFlags(w, own)
	}
	var globals []*pflag.Flag
	global.VisitAll(func(f *pflag.Flag) { globals = append(globals, f) })
	fmt.Fprint(w, "\nGlobal flags:\n")
	writeFlags(w, globals)
	fmt.Fprint(w, "\nFlags take their value as --flag value or --flag=value; boolean flags as --flag, --flag=false or --flag false.\n")
}

// synopsis is the usage line: required flags, then the optional ones in
// brackets, then the positional arguments.
func synopsis(c *command, fs *flagSet) string {
	parts := []string{"runledger", c.name}
	for _, name := range fs.order {
		if fs.global[name] {
			continue
		}
		spelled := spelling(fs.Lookup(name))
		if !fs.required[name] {
			spelled = "[" + spelled + "]"
		}
		parts = append(parts, spelled)
	}
	if c.args != "" {
		parts = append(parts, c.args)
	}
	parts = append(parts, "[--json] [--database-url URL]")
	return strings.Join(parts, " ")
}

// spelling is how help writes flag f: --name PLACEHOLDER, --name=BOOL or
// --name, with its shorthand first when it has one.
func spelling(f *pflag.Flag) string {
	spelled := "--" + f.Name
	switch {
	case f.NoOptDefVal == "":
		placeholder, _ := pflag.UnquoteUsage(f)
		spelled += " " + placeholder
	case f.Annotations[annotationValued] != nil:
		spelled += "=BOOL"
	}
	if f.Shorthand != "" {
		spelled = "-" + f.Shorthand + ", " + spelled
	}
	return spelled
}

// writeFlags prints flags as an aligned table.
func writeFlags(w io.Writer, flags []*pflag.Flag) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, f := range flags {
		usage := f.Usage
		if f.NoOptDefVal == "" {
			// "`UUID`: the job" reads "UUID: the job"; the column shows UUID.
			placeholder, unquoted := pflag.UnquoteUsage(f)
			usage = unquoted
			if rest, ok := strings.CutPrefix(usage, placeholder+": "); ok && rest != "" {
				usage = strings.ToUpper(rest[:1]) + rest[1:]
			}
		}
		if f.Annotations[annotationRequired] != nil {
			usage += " Required."
		}
		// tabwriter cells cannot hold line breaks; wrap long text by hand.
		lines := wrap(usage, 72)
		fmt.Fprintf(tw, "  %s\t%s\n", spelling(f), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(tw, "  \t%s\n", l)
		}
	}
	_ = tw.Flush()
}

func isBool(f *pflag.Flag) bool { return isBoolValue(f.Value) }

// wrap splits text into lines of at most width characters at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}
