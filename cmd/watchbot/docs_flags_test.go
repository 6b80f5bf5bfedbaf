package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated flag tables of docs/ (make docs)")

// A generated flag table lies between a start marker naming a command (subcommands after a
// slash) and, optionally, the flags to list, and the end marker:
//
//	<!-- flags: listen --dedupe-table --dedupe-key -->
//	| flag | env | default | meaning |
//	...
//	<!-- end flags -->
//
// "rest" instead of flags lists those no other table of docs/ lists, so each flag is
// documented on one page: its topic's, or the command's.
const (
	flagsStart = "<!-- flags: "
	flagsEnd   = "<!-- end flags -->"
)

// TestDocsFlagTables keeps every flag table of docs/ equal to the CLI's flag definitions: the
// names, environment variables, defaults and help lines are the ones --help prints. make docs
// rewrites them (-update-docs).
func TestDocsFlagTables(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	app := newApp(nil, nil, nil, nil)
	texts := map[string]string{}
	listed := map[string]string{} // "command --flag" to the page whose table lists it
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		texts[page] = string(b)
		for _, spec := range flagSpecs(string(b)) {
			for _, f := range spec[1:] {
				key := spec[0] + " " + f
				if other, ok := listed[key]; ok && f != "rest" {
					t.Errorf("%s and %s both list %s: document each flag on one page", other, page, key)
				}
				listed[key] = page
			}
		}
	}
	tables := 0
	for _, page := range pages {
		got, n, err := renderFlagTables(texts[page], app, listed)
		b := []byte(texts[page])
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		tables += n
		if got == string(b) {
			continue
		}
		if *updateDocs {
			if err := os.WriteFile(page, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: a flag table differs from the CLI's flags: run make docs", page)
	}
	if tables == 0 {
		t.Error("no generated flag table in docs/")
	}
}

// flagSpecs returns the start markers' words of page's generated tables: the command, then the
// flags.
func flagSpecs(page string) [][]string {
	var specs [][]string
	for _, part := range strings.Split(page, flagsStart)[1:] {
		if spec, _, ok := strings.Cut(part, "-->"); ok {
			if words := strings.Fields(spec); len(words) > 0 {
				specs = append(specs, words)
			}
		}
	}
	return specs
}

// renderFlagTables returns page with every generated flag table rendered afresh, and how many
// it holds. listed holds every "command --flag" some table lists, for "rest".
func renderFlagTables(page string, app *cli.App, listed map[string]string) (string, int, error) {
	var out strings.Builder
	n := 0
	for {
		start := strings.Index(page, flagsStart)
		if start < 0 {
			out.WriteString(page)
			return out.String(), n, nil
		}
		lineEnd := strings.Index(page[start:], "-->")
		end := strings.Index(page[start:], flagsEnd)
		if lineEnd < 0 || end < 0 || end < lineEnd {
			return "", 0, fmt.Errorf("%q without %q", page[start:min(len(page), start+60)], flagsEnd)
		}
		spec := strings.Fields(page[start+len(flagsStart) : start+lineEnd])
		if len(spec) == 0 {
			return "", 0, fmt.Errorf("a flag table names no command")
		}
		only := spec[1:]
		if slices.Equal(only, []string{"rest"}) {
			only = restOf(app, spec[0], listed)
		}
		table, err := flagTable(app, spec[0], only)
		if err != nil {
			return "", 0, err
		}
		out.WriteString(page[:start+lineEnd+len("-->")])
		out.WriteString("\n" + table)
		out.WriteString(flagsEnd)
		page = page[start+end+len(flagsEnd):]
		n++
	}
}

// restOf returns the flags of the command at path that no table in listed lists.
func restOf(app *cli.App, path string, listed map[string]string) []string {
	var rest []string
	if cmd := commandAt(app, path); cmd != nil {
		for _, f := range cmd.Flags {
			name := "--" + f.Names()[0]
			if _, ok := listed[path+" "+name]; !ok && name != "--help" {
				rest = append(rest, name)
			}
		}
	}
	return rest
}

// flagTable renders the flags of the command at path ("listen", "dead-letter/replay"), or only
// those named, in the order given, as a Markdown table.
func flagTable(app *cli.App, path string, only []string) (string, error) {
	cmd := commandAt(app, path)
	if cmd == nil {
		return "", fmt.Errorf("no command %q", path)
	}
	flags := cmd.Flags
	if len(only) > 0 {
		flags = nil
		for _, name := range only {
			f := findFlag(cmd.Flags, strings.TrimLeft(name, "-"))
			if f == nil {
				return "", fmt.Errorf("%s has no flag %s", path, name)
			}
			flags = append(flags, f)
		}
	}
	var b strings.Builder
	b.WriteString("| flag | env | default | meaning |\n| --- | --- | --- | --- |\n")
	for _, f := range flags {
		names := f.Names()
		for i, name := range names {
			names[i] = "`" + dashes(name) + "`"
		}
		env := ""
		if e, ok := f.(interface{ GetEnvVars() []string }); ok {
			for i, v := range e.GetEnvVars() {
				if i > 0 {
					env += ", "
				}
				env += "`" + v + "`"
			}
		}
		usage := ""
		if u, ok := f.(interface{ GetUsage() string }); ok {
			usage, _ = unquoteUsage(u.GetUsage())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.Join(names, ", "), env, flagDefault(f),
			strings.ReplaceAll(usage, "|", `\|`))
	}
	return b.String(), nil
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagDefault is the default --help shows: a value in code type, a description as text, "" for
// none.
func flagDefault(f cli.Flag) string {
	if b, ok := f.(*cli.BoolFlag); ok {
		if b.Value {
			return "on"
		}
		return "off"
	}
	if v := reflect.ValueOf(f).Elem().FieldByName("DefaultText"); v.IsValid() && v.String() != "" {
		if _, err := parseDuration(v.String()); err == nil {
			return "`" + v.String() + "`"
		}
		return v.String()
	}
	d, ok := f.(cli.DocGenerationFlag)
	if !ok || !d.TakesValue() {
		return ""
	}
	v := strings.Trim(d.GetDefaultText(), `"`)
	if v == "" || v == "[]" {
		return ""
	}
	return "`" + v + "`"
}

// unquoteUsage drops the backquotes urfave/cli reads as a value's placeholder.
func unquoteUsage(usage string) (string, string) {
	name, text := "", usage
	if i := strings.Index(usage, "`"); i >= 0 {
		if j := strings.Index(usage[i+1:], "`"); j >= 0 {
			name = usage[i+1 : i+1+j]
			text = usage[:i] + name + usage[i+1+j+1:]
		}
	}
	return text, name
}

// TestHandWrittenFlagTables holds the flag tables of docs/ whose meanings are longer than
// --help's lines to the CLI: each names every flag of its command and no other, and each
// default it gives as a value is the flag's.
func TestHandWrittenFlagTables(t *testing.T) {
	for _, tt := range []struct {
		page, section, command string
		defaults               bool // the table's second column is the default
	}{
		{"template.md", "## Options (chosen when generating)", "template", true},
		{"operator-tools.md", "## `watchbot dead-letter`", "dead-letter", false},
		{"operator-tools.md", "## `watchbot send`", "send", false},
	} {
		t.Run(tt.page+" "+tt.command, func(t *testing.T) {
			checkFlagTable(t, tt.page, tt.section, tt.command, tt.defaults)
		})
	}
}

func checkFlagTable(t *testing.T, page, heading, command string, defaults bool) {
	b, err := os.ReadFile("../../docs/" + page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), heading+"\n")
	if !ok {
		t.Fatalf("docs/%s has no section %q", page, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	cmd := commandAt(newApp(nil, nil, nil, nil), command)
	named := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `--") || len(cells) < 4 {
			continue
		}
		names := backquotedFlag.FindAllStringSubmatch(cells[1], -1)
		given := strings.Split(strings.TrimSpace(cells[2]), ", ")
		for i, m := range names {
			f := findFlag(cmd.Flags, m[1])
			if f == nil {
				t.Errorf("docs/%s lists --%s, which watchbot %s does not have", page, m[1], command)
				continue
			}
			named[m[1]] = true
			want := flagDefault(f)
			if !defaults || len(given) != len(names) || !strings.HasPrefix(want, "`") {
				continue // no default column, a default described in words, or one for several flags
			}
			got, _, _ := strings.Cut(strings.Trim(given[i], "` "), " (")
			if got != strings.Trim(want, "`") {
				t.Errorf("docs/%s gives --%s the default %q; the CLI's is %s", page, m[1], got, want)
			}
		}
	}
	for _, f := range cmd.Flags {
		if name := f.Names()[0]; !named[name] && name != "help" {
			t.Errorf("docs/%s's table of watchbot %s does not list --%s", page, command, name)
		}
	}
}
