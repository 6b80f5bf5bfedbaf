package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"
)

// maxREADMELines keeps the README an introduction; the reference is docs/.
const maxREADMELines = 250

func TestREADMELength(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to its page in docs/", n, maxREADMELines)
	}
}

// docPages returns the README and every page of docs/, by path relative to cmd/watchbot.
func docPages(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, "../../README.md", "../../CONTRIBUTING.md")
	pages := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pages[filepath.Clean(p)] = string(b)
	}
	return pages
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks checks that every page of docs/ is linked from docs/README.md, and that every
// relative link of the README and docs/ names a file that exists and, with a #fragment, a
// heading of that file.
func TestDocsLinks(t *testing.T) {
	pages := docPages(t)
	index := pages[filepath.Clean("../../docs/README.md")]
	for p := range pages {
		if filepath.Dir(p) != filepath.Clean("../../docs") || filepath.Base(p) == "README.md" {
			continue
		}
		if !strings.Contains(index, "]("+filepath.Base(p)+")") {
			t.Errorf("docs/README.md does not link %s", filepath.Base(p))
		}
	}
	for p, text := range pages {
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			path := p
			if file != "" {
				path = filepath.Clean(filepath.Join(filepath.Dir(p), file))
			}
			info, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s links %s: %v", p, target, err)
				continue
			}
			if fragment == "" || info.IsDir() {
				continue
			}
			linked, ok := pages[path]
			if !ok {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				linked = string(b)
			}
			if !slices.Contains(anchors(linked), fragment) {
				t.Errorf("%s links %s: %s has no heading with that anchor", p, target, path)
			}
		}
	}
}

// withoutCode returns text without its fenced code blocks.
func withoutCode(text string) string {
	var b strings.Builder
	inside := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inside = !inside
			continue
		}
		if !inside {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// anchors returns the anchors GitHub gives the headings of a Markdown page: lower case,
// spaces to hyphens, punctuation other than hyphens and underscores dropped.
func anchors(text string) []string {
	var out []string
	for _, line := range strings.Split(withoutCode(text), "\n") {
		heading, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		heading = strings.TrimSpace(strings.TrimLeft(heading, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestDocsCommandLines runs every `watchbot …` command line of the README's and docs/' code
// blocks through the CLI's own flag parsing, with every command's action replaced by one that
// only parses: an unknown command or flag, or a value a flag refuses, fails the test. Synopsis
// lines ([optional] parts, …) are not examples and are skipped.
func TestDocsCommandLines(t *testing.T) {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard, nil)
	parseOnly(app.Commands)
	app.HideVersion = true
	n := 0
	for p, text := range docPages(t) {
		for _, args := range commandLines(text) {
			n++
			if err := app.Run(args); err != nil {
				t.Errorf("%s: %s: %v", p, strings.Join(args, " "), err)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d watchbot command lines found in the docs", n)
	}
}

// parseOnly replaces the actions of cmds and their subcommands with ones that return once
// urfave/cli has parsed the flags; progress parses its own.
func parseOnly(cmds []*cli.Command) {
	for _, c := range cmds {
		c.Before, c.After = nil, nil
		if c.Name == "progress" {
			c.Action = func(c *cli.Context) error {
				_, err := parseProgressArgs(c.Args().Slice())
				return err
			}
		} else {
			c.Action = func(*cli.Context) error { return nil }
		}
		parseOnly(c.Subcommands)
	}
}

var (
	heredoc      = regexp.MustCompile(`<<-?\s*['"]?(\w+)['"]?`)
	shellComment = regexp.MustCompile(`\s#\s.*$`)
)

// commandLines returns the watchbot command lines in the shell and console blocks of a page,
// each as the words a shell would pass, "watchbot" first.
func commandLines(text string) [][]string {
	var out [][]string
	lang, inside, endHeredoc := "", false, ""
	var pending string
	for _, line := range strings.Split(text, "\n") {
		if fence, ok := strings.CutPrefix(line, "```"); ok {
			lang, inside, pending, endHeredoc = strings.TrimSpace(fence), !inside, "", ""
			continue
		}
		if !inside || !slices.Contains([]string{"", "sh", "bash", "console", "shell"}, lang) {
			continue
		}
		if endHeredoc != "" {
			if strings.TrimSpace(line) == endHeredoc {
				endHeredoc = ""
			}
			continue
		}
		if lang == "console" {
			cmd, ok := strings.CutPrefix(line, "$ ")
			if !ok {
				continue
			}
			line = cmd
		}
		if m := heredoc.FindStringSubmatch(line); m != nil {
			endHeredoc = m[1]
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		line = shellComment.ReplaceAllString(line, "")
		if strings.ContainsAny(line, "[…") || strings.Contains(line, "...") || strings.Contains(line, "(--") {
			continue
		}
		for _, words := range shellCommands(line) {
			if len(words) > 0 && (words[0] == "watchbot" || strings.HasSuffix(words[0], "/watchbot")) {
				out = append(out, append([]string{"watchbot"}, words[1:]...))
			}
		}
	}
	return out
}

// shellCommands splits one shell line into its simple commands' words: quotes removed,
// variables kept as written, redirections and comments dropped, $(…) read as a command of
// its own.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord, skipNext := false, false
	endWord := func() {
		if inWord {
			if skipNext {
				skipNext = false
			} else {
				words = append(words, word.String())
			}
		}
		word.Reset()
		inWord = false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\'' || r == '"':
			j := i + 1
			for j < len(rs) && rs[j] != r {
				j++
			}
			if r == '"' && strings.Contains(string(rs[i+1:min(j, len(rs))]), "$(") {
				cmds = append(cmds, subshells(string(rs[i+1:min(j, len(rs))]))...)
			}
			word.WriteString(string(rs[i+1 : min(j, len(rs))]))
			inWord, i = true, j
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			depth, j := 0, i+1
			for ; j < len(rs); j++ {
				if rs[j] == '(' {
					depth++
				} else if rs[j] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			cmds = append(cmds, shellCommands(string(rs[i+2:min(j, len(rs))]))...)
			word.WriteString("X")
			inWord, i = true, j
		case r == '#' && !inWord:
			i = len(rs)
		case r == '|' || r == ';' || r == '&' || r == '(' || r == ')':
			endCmd()
		case r == '>' || r == '<':
			if inWord && strings.Trim(word.String(), "0123456789") == "" {
				word.Reset()
				inWord = false
			}
			endWord()
			for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '<' || rs[i+1] == '&') {
				i++
			}
			skipNext = true
		case unicode.IsSpace(r):
			endWord()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// subshells returns the commands of the $(…) inside a double-quoted string.
func subshells(s string) [][]string {
	var out [][]string
	for {
		i := strings.Index(s, "$(")
		if i < 0 {
			return out
		}
		j := strings.Index(s[i:], ")")
		if j < 0 {
			return out
		}
		out = append(out, shellCommands(s[i+2:i+j])...)
		s = s[i+j+1:]
	}
}

// otherProgramsFlags are flags of other programs the docs name in backquotes, by program.
var otherProgramsFlags = map[string]string{"init": "docker run", "tmpfs": "docker run", "shm-size": "docker run", "parameters": "scripts/lint-template"}

var backquotedFlag = regexp.MustCompile("`--([a-z0-9][a-z0-9-]*)")

// TestDocsNameRealFlags checks that every flag the README and docs/ name in backquotes, in
// prose and in hand-written tables, is a flag of some watchbot command, so a renamed or
// removed flag cannot linger in the docs. `--brake-*` names the flags with that prefix.
func TestDocsNameRealFlags(t *testing.T) {
	known := map[string]bool{"help": true, "version": true} // urfave/cli's own
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				for _, n := range f.Names() {
					known[n] = true
				}
			}
			walk(c.Subcommands)
		}
	}
	walk(newApp(nil, io.Discard, io.Discard, nil).Commands)
	for p, text := range docPages(t) {
		for _, m := range backquotedFlag.FindAllStringSubmatch(withoutCode(text), -1) {
			if _, other := otherProgramsFlags[m[1]]; other {
				continue
			}
			if !known[m[1]] && !(strings.HasSuffix(m[1], "-") && hasPrefixed(known, m[1])) {
				t.Errorf("%s names --%s, which no watchbot command has (another program's? add it to otherProgramsFlags)", p, m[1])
			}
		}
	}
}

func hasPrefixed(known map[string]bool, prefix string) bool {
	for name := range known {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// TestREADMEContainer runs the README's container recipe and ECS snippet through listen's
// flag parsing and validation: the Dockerfile's ENTRYPOINT and CMD, with the environment the
// task definition gives, is a listen that starts.
func TestREADMEContainer(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(string(b))
	if len(blocks["dockerfile"]) != 1 || len(blocks["json"]) != 1 {
		t.Fatalf("the README has %d Dockerfiles and %d JSON blocks, want 1 and 1", len(blocks["dockerfile"]), len(blocks["json"]))
	}
	var entrypoint, command []string
	for _, line := range strings.Split(blocks["dockerfile"][0], "\n") {
		if v, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(v), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT: %v", err)
			}
		}
		if v, ok := strings.CutPrefix(line, "CMD "); ok {
			if err := json.Unmarshal([]byte(v), &command); err != nil {
				t.Fatalf("CMD: %v", err)
			}
		}
	}
	if len(entrypoint) < 2 || entrypoint[0] != "/usr/local/bin/watchbot" || entrypoint[1] != "listen" || len(command) == 0 {
		t.Fatalf("ENTRYPOINT %q, CMD %q: want watchbot listen and a worker", entrypoint, command)
	}
	var container struct {
		Name, Image string
		StopTimeout int
		Environment []struct{ Name, Value string }
	}
	if err := json.Unmarshal([]byte(blocks["json"][0]), &container); err != nil {
		t.Fatalf("the README's container definition: %v", err)
	}
	for _, e := range container.Environment {
		t.Setenv(e.Name, e.Value)
	}
	cfg, err := parseListenCommand(append(entrypoint[1:], command...))
	if err != nil {
		t.Fatalf("listen would not start: %v", err)
	}
	if cfg.QueueURL == "" || !slices.Equal(cfg.Command, command) {
		t.Errorf("listen reads queue %q and command %q, want the task's QueueUrl and CMD %q", cfg.QueueURL, cfg.Command, command)
	}
	if stop := time.Duration(container.StopTimeout) * time.Second; stop < cfg.ShutdownTimeout+cfg.KillGrace {
		t.Errorf("stopTimeout %v is shorter than --shutdown-timeout + --kill-grace (%v)", stop, cfg.ShutdownTimeout+cfg.KillGrace)
	}
}

var (
	goTestRun   = regexp.MustCompile("go test [^`\\n]*?-run '?\\^?([A-Za-z0-9_|]*)\\$?'?[^`\\n]*?\\./([a-z0-9/]+?)/?(?:[`\\s]|$)")
	goTestBench = regexp.MustCompile("-bench '?([A-Za-z0-9_]+)'?")
)

// TestDocsGoTestCommands checks that every `go test -run NAME ./PKG/` the docs give to
// reproduce a figure names tests (or benchmarks) that exist in that package.
func TestDocsGoTestCommands(t *testing.T) {
	n := 0
	for p, text := range docPages(t) {
		for _, m := range goTestRun.FindAllStringSubmatch(text, -1) {
			names := strings.Split(m[1], "|")
			if b := goTestBench.FindStringSubmatch(m[0]); b != nil {
				names = []string{"Benchmark" + b[1]}
			} else if m[1] == "" {
				continue
			}
			dir := filepath.Join("../..", m[2])
			files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
			var src strings.Builder
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				src.Write(b)
			}
			for _, name := range names {
				if name == "TestX" {
					continue // CONTRIBUTING's pattern
				}
				n++
				if !regexp.MustCompile(`\nfunc (Test|Benchmark)?` + name).MatchString(src.String()) {
					t.Errorf("%s: %s names %s, which is not a test of %s", p, strings.Trim(m[0], "` \n"), name, m[2])
				}
			}
		}
	}
	if n == 0 {
		t.Error("no go test -run command found in the docs")
	}
}
