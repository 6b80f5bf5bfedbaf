package main

import (
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
)

// maxUsage keeps each flag's help on one readable line; the detail is in docs/.
const maxUsage = 90

// TestHelp checks that every command's help ends with examples, that each example parses
// with the command's real flags, and that every flag's help fits one line.
func TestHelp(t *testing.T) {
	for path := range examples {
		if path == "" {
			continue
		}
		if cmd := commandAt(newApp(nil, io.Discard, io.Discard, nil), path); cmd == nil {
			t.Errorf("examples name %q, which is not a command", path)
		}
	}
	var walk func(cmds []*cli.Command, parent string)
	walk = func(cmds []*cli.Command, parent string) {
		for _, c := range cmds {
			path := strings.TrimPrefix(parent+"/"+c.Name, "/")
			if n := utf8.RuneCountInString(c.Usage); n > maxUsage {
				t.Errorf("watchbot %s: a one-line summary of %d characters, more than %d", strings.ReplaceAll(path, "/", " "), n, maxUsage)
			}
			if len(examples[path]) == 0 {
				t.Errorf("watchbot %s --help shows no example", strings.ReplaceAll(path, "/", " "))
			}
			for _, f := range c.Flags {
				if u, ok := f.(interface{ GetUsage() string }); ok && utf8.RuneCountInString(u.GetUsage()) > maxUsage {
					t.Errorf("watchbot %s --%s: help of %d characters, more than %d: move the detail to docs/",
						strings.ReplaceAll(path, "/", " "), f.Names()[0], utf8.RuneCountInString(u.GetUsage()), maxUsage)
				}
			}
			walk(c.Subcommands, path)
		}
	}
	walk(newApp(nil, io.Discard, io.Discard, nil).Commands, "")

	app := newApp(strings.NewReader(""), io.Discard, io.Discard, nil)
	parseOnly(app.Commands)
	for path, lines := range examples {
		for _, line := range lines {
			if strings.Contains(line, "COMMAND") {
				continue
			}
			for _, words := range shellCommands(line) {
				if words[0] != "watchbot" {
					continue
				}
				if err := app.Run(words); err != nil {
					t.Errorf("the example of %q, %s: %v", path, line, err)
				}
			}
		}
	}

	for _, args := range [][]string{{"watchbot", "--help"}, {"watchbot", "listen", "--help"},
		{"watchbot", "dead-letter", "--help"}, {"watchbot", "dead-letter", "replay", "--help"}, {"watchbot", "progress", "--help"}} {
		var out strings.Builder
		if err := newApp(strings.NewReader(""), &out, io.Discard, nil).Run(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(out.String(), "\nEXAMPLE") {
			t.Errorf("%s prints no example:\n%s", strings.Join(args, " "), out.String())
		}
	}
}

// commandAt returns the command at path ("dead-letter/peek"), or nil.
func commandAt(app *cli.App, path string) *cli.Command {
	cmds := app.Commands
	var cmd *cli.Command
	for _, name := range strings.Split(path, "/") {
		cmd = nil
		for _, c := range cmds {
			if c.HasName(name) {
				cmd = c
			}
		}
		if cmd == nil {
			return nil
		}
		cmds = cmd.Subcommands
	}
	return cmd
}
