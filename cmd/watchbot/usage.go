package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Mistakes in what the user typed are answered in one line that names what was wrong and
// what to type instead: the nearest flag, command or verb, or where the help is. urfave/cli's
// own answers ("flag provided but not defined: -concurency", "No help topic for 'peak'", a
// whole help page before a missing flag) say neither.

// onUsageError is every command's OnUsageError: a bad flag or value is bad usage (exit 2),
// printed once as one line, without the help text.
func onUsageError(c *cli.Context, err error, _ bool) error {
	return usageError{explainFlagError(c, err)}
}

// explainFlagError rewrites the flag package's errors about c's flags.
func explainFlagError(c *cli.Context, err error) error {
	return rewriteFlagError(err, commandName(c), flagNames(c), func(name string) string { return valueKind(c.Command, name) })
}

// rewriteFlagError rewrites the flag package's errors about the flags (names) of cmd: the
// nearest flag for an unknown one, two dashes, and what kind of value a flag takes.
func rewriteFlagError(err error, cmd string, names []string, kind func(name string) string) error {
	msg := err.Error()
	help := fmt.Sprintf("(%s --help lists the flags)", cmd)
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag provided but not defined: "), "-")
		if near := nearest(name, names); near != "" {
			return fmt.Errorf("%s has no flag %s: did you mean %s? %s", cmd, dashed(name), dashed(near), help)
		}
		return fmt.Errorf("%s has no flag %s %s", cmd, dashed(name), help)
	case strings.HasPrefix(msg, "flag needs an argument: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag needs an argument: "), "-")
		return fmt.Errorf("%s needs a value %s", dashed(name), help)
	case strings.HasPrefix(msg, "invalid value "):
		// invalid value "four" for flag -concurrency: parse error
		value, rest, _ := strings.Cut(strings.TrimPrefix(msg, "invalid value "), " for flag ")
		name, why, _ := strings.Cut(rest, ": ")
		name = strings.TrimLeft(name, "-")
		if why == "parse error" {
			why = value + " is not " + kind(name)
		}
		return fmt.Errorf("%s: %s", dashed(name), why)
	}
	return err
}

// dashed is a flag as it is typed: -p, --part.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// commandName is "watchbot listen", "watchbot dead-letter peek", or "watchbot".
func commandName(c *cli.Context) string {
	if c.Command == nil || c.Command.Name == "" {
		return "watchbot"
	}
	parts := []string{}
	for _, cc := range c.Lineage() {
		if cc.Command != nil && cc.Command.Name != "" && cc.Command.Name != "watchbot" {
			parts = append([]string{cc.Command.Name}, parts...)
		}
	}
	return strings.Join(append([]string{"watchbot"}, parts...), " ")
}

// flagNames are the flags c's command takes (with their aliases), and those of the commands
// above it that a verb also accepts.
func flagNames(c *cli.Context) []string {
	var names []string
	add := func(flags []cli.Flag) {
		for _, f := range flags {
			names = append(names, f.Names()...)
		}
	}
	if c.Command != nil {
		add(c.Command.Flags)
	}
	if c.App != nil {
		add(c.App.Flags)
	}
	return names
}

// valueKind says what the value of cmd's flag name must be, for "parse error".
func valueKind(cmd *cli.Command, name string) string {
	if cmd != nil {
		for _, f := range cmd.Flags {
			if !slices.Contains(f.Names(), name) {
				continue
			}
			switch f.(type) {
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
				return "a whole number"
			case *cli.Float64Flag:
				return "a number"
			case *cli.BoolFlag:
				return "true or false"
			}
		}
	}
	return "a valid value"
}

// nearest returns the candidate closest to name when it is close enough to be a typo: within
// an edit distance of a third of its length (at least 2), or a prefix of it.
func nearest(name string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		if len(c) < 2 {
			continue
		}
		d := editDistance(strings.ToLower(name), c)
		if strings.HasPrefix(c, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" || bestDist > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// commandNames are the visible names of cmds.
func commandNames(cmds []*cli.Command) []string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden && c.Name != "help" {
			names = append(names, c.Name)
		}
	}
	return names
}

// unknownCommand is the answer to a command or verb that does not exist: the ones that do,
// and the nearest.
func unknownCommand(where, what, name string, cmds []*cli.Command) error {
	names := commandNames(cmds)
	msg := fmt.Sprintf("%s has no %s %q: the %ss are %s", where, what, name, what, strings.Join(names, ", "))
	if near := nearest(name, names); near != "" {
		msg += fmt.Sprintf("; did you mean %s?", near)
	}
	return usageError{errors.New(msg)}
}

// rootAction runs when no command was named: watchbot alone shows the help, "watchbot help
// [COMMAND [VERB]]" the help of that command, and anything else is an unknown command.
func rootAction(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		return cli.ShowAppHelp(c)
	}
	if args[0] != "help" {
		return unknownCommand("watchbot", "command", args[0], c.App.Commands)
	}
	topic := args[1:]
	if len(topic) == 0 {
		return cli.ShowAppHelp(c)
	}
	cmds, where := c.App.Commands, "watchbot"
	var found *cli.Command
	for _, name := range topic {
		i := slices.IndexFunc(cmds, func(cmd *cli.Command) bool { return cmd.HasName(name) })
		if i < 0 {
			what := "command"
			if found != nil {
				what = "verb"
			}
			return unknownCommand(where, what, name, cmds)
		}
		found = cmds[i]
		cmds, where = found.Subcommands, where+" "+found.Name
	}
	tmpl := found.CustomHelpTemplate
	if tmpl == "" {
		tmpl = cli.CommandHelpTemplate
		if len(found.Subcommands) > 0 {
			tmpl = cli.SubcommandHelpTemplate
		}
	}
	// The templates print HelpName, which urfave/cli sets only for a command it runs.
	if found.HelpName == "" {
		found.HelpName = where
	}
	cli.HelpPrinter(c.App.Writer, tmpl, found)
	return nil
}

// withUsage gives every command the usage-error handler, every command with verbs an answer
// to an unknown verb, and every command that takes no arguments a refusal of stray ones.
func withUsage(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		switch {
		case len(c.Subcommands) > 0 && c.Action == nil:
			c.Action = verbAction(c)
		case c.ArgsUsage == "" && !c.SkipFlagParsing && c.Action != nil:
			c.Action = noArguments(explained(c.Action))
		case c.Action != nil:
			c.Action = explained(c.Action)
		}
		withUsage(c.Subcommands)
	}
}

// verbAction answers a command with verbs given no verb (its help) or an unknown one.
func verbAction(cmd *cli.Command) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			return cli.ShowSubcommandHelp(c)
		}
		return unknownCommand(commandName(c), "verb", c.Args().First(), cmd.Subcommands)
	}
}

// noArguments refuses positional arguments before action runs, naming them.
func noArguments(action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			return action(c)
		}
		hint := "flags start with --"
		if slices.ContainsFunc(c.Command.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "body") }) {
			hint = "a message body goes in --body"
		}
		return usagef("%s takes no arguments, but got %s: %s", commandName(c), quoteArgs(c.Args().Slice()), hint)
	}
}
