package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// helpCommand is `runledger help [command words]`.
func helpCommand(stdout, stderr io.Writer, asJSON bool, args []string) int {
	var words []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
		}
	}
	if len(words) == 0 {
		return printHelp(stdout, asJSON, nil, "")
	}
	cmd, rest, group, err := lookup(words)
	if err != nil {
		if group != "" && len(words) == 1 {
			return printHelp(stdout, asJSON, nil, group)
		}
		writeError(stderr, asJSON, "help", err)
		return exitUsage
	}
	if len(rest) > 0 {
		writeError(stderr, asJSON, "help", usageErrorf("unknown %s subcommand %q", cmd.name, rest[0]))
		return exitUsage
	}
	return printHelp(stdout, asJSON, cmd, "")
}

// printHelp prints the help of cmd, of a group, or (both empty) the
// overview, on stdout, and returns exit code 0. With --json the text is
// the value of {"help": ...}.
func printHelp(w io.Writer, asJSON bool, cmd *command, group string) int {
	var b bytes.Buffer
	switch {
	case cmd != nil:
		commandHelp(&b, cmd)
	case group != "":
		groupHelp(&b, group)
	default:
		overview(&b)
	}
	if asJSON {
		writeJSON(w, map[string]string{"help": b.String()})
	} else {
		_, _ = w.Write(b.Bytes())
	}
	return exitOK
}

func overview(w io.Writer) {
	fmt.Fprint(w, `runledger: a durable job ledger on PostgreSQL, with compare-and-replay of succeeded jobs.

Usage:
  runledger <command> [flags]
  runledger help <command>      (or: runledger <command> --help)

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		name := c.name
		if c.args != "" {
			name += " " + c.args
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, c.summary)
	}
	fmt.Fprintf(tw, "  help [command]\tShow help for runledger or one command.\n")
	_ = tw.Flush()
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

func groupHelp(w io.Writer, group string) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  runledger %s <subcommand> [flags]\n\nSubcommands:\n", groups[group], group)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		if c.words()[0] == group {
			name := c.name
			if c.args != "" {
				name += " " + c.args
			}
			fmt.Fprintf(tw, "  %s\t%s\n", name, c.summary)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nRun 'runledger help %s <subcommand>' for a subcommand's flags and output.\n", group)
}

func commandHelp(w io.Writer, c *command) {
	fs := newFlagSet(c.name)
	defineGlobalFlags(fs, false, "")
	c.setup(fs)

	fmt.Fprintf(w, "Usage:\n  %s\n\n%s\n", synopsis(c, fs), strings.TrimSpace(c.summary))
	if h := strings.TrimSpace(c.help); h != "" {
		fmt.Fprintf(w, "\n%s\n", h)
	}
	var own, global []string
	for _, name := range fs.order {
		if fs.global[name] {
			global = append(global, name)
		} else {
			own = append(own, name)
		}
	}
	if len(own) > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		writeFlags(w, fs, own)
	}
	fmt.Fprint(w, "\nGlobal flags:\n")
	writeFlags(w, fs, global, "-h, --help", "Show this help.")
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
		f := fs.Lookup(name)
		spelled := "--" + name
		if isBool(f) {
			if fs.valued[name] {
				spelled += "=BOOL"
			}
		} else {
			placeholder, _ := flag.UnquoteUsage(f)
			spelled += " " + placeholder
		}
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

// writeFlags prints the named flags, then the extra (spelling, usage)
// pairs, as an aligned table.
func writeFlags(w io.Writer, fs *flagSet, names []string, extra ...string) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	row := func(spelled, usage string) {
		// tabwriter cells cannot hold line breaks; wrap long text by hand.
		lines := wrap(usage, 72)
		fmt.Fprintf(tw, "  %s\t%s\n", spelled, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(tw, "  \t%s\n", l)
		}
	}
	for _, name := range names {
		f := fs.Lookup(name)
		placeholder, usage := flag.UnquoteUsage(f)
		// "`UUID`: the job" reads "UUID: the job"; the column shows UUID.
		if rest, ok := strings.CutPrefix(usage, placeholder+": "); ok && rest != "" {
			usage = strings.ToUpper(rest[:1]) + rest[1:]
		}
		spelled := "--" + name
		if !isBool(f) {
			spelled += " " + placeholder
		} else if fs.valued[name] {
			spelled += "=BOOL"
		}
		if fs.required[name] {
			usage += " Required."
		}
		row(spelled, usage)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		row(extra[i], extra[i+1])
	}
	_ = tw.Flush()
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

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
