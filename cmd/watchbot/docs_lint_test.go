package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// docsCronYAML stands for the cron.yaml the docs' template commands name: Elastic Beanstalk's
// own example of periodic tasks.
const docsCronYAML = `version: 1
cron:
 - name: "backup-job"
   url: "/backup"
   schedule: "0 */12 * * *"
`

// TestDocsTemplatesPassTheLinter runs every `watchbot template` command line of the README and
// docs/ with the built binary, each writing its own file (a cron.yaml it names is Beanstalk's
// example), and lints every template with scripts/lint-template, the command docs/template.md
// gives users: none may have an error or a warning.
func TestDocsTemplatesPassTheLinter(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(root, "scripts", "local-sqs"), "--install").CombinedOutput(); err != nil {
		testenv.Require(t, "the linter did not install", fmt.Errorf("%w\n%s", err, out))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cron.yaml"), []byte(docsCronYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := testenv.Binary(t)
	var files []string
	for page, text := range docPages(t) {
		for _, args := range commandLines(text) {
			if len(args) < 2 || args[1] != "template" {
				continue
			}
			file := filepath.Join(dir, "stack-"+strconv.Itoa(len(files)))
			cmd := exec.Command(bin, withOutput(args[1:], file)...)
			cmd.Dir, cmd.Env = dir, testenv.CleanEnv(t)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %s: %v\n%s", page, strings.Join(args, " "), err, out)
			}
			files = append(files, file)
		}
	}
	if len(files) < 4 {
		t.Fatalf("only %d watchbot template command lines found in the docs", len(files))
	}
	lint := exec.CommandContext(t.Context(), filepath.Join(root, "scripts", "lint-template"), files...)
	lint.Env = testenv.CleanEnv(t)
	var out testenv.Buffer
	lint.Stdout, lint.Stderr = &out, &out
	if code := testenv.Spawn(t, lint).Wait(t, 5*time.Minute, out.String); code != 0 {
		t.Errorf("scripts/lint-template exit %d on the docs' templates:\n%s", code, out.String())
	}
}

// withOutput returns a template command's arguments writing to file: its --output (or -o)
// replaced, or one added before the worker command.
func withOutput(args []string, file string) []string {
	args = slices.Clone(args)
	for i, a := range args {
		if a == "--" {
			break
		}
		if (a == "--output" || a == "-o") && i+1 < len(args) {
			args[i+1] = file
			return args
		}
	}
	if i := slices.Index(args, "--"); i >= 0 {
		return slices.Insert(args, i, "--output", file)
	}
	return append(args, "--output", file)
}
