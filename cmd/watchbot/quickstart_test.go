//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestQuickstart runs the README's quickstart as a reader would: scripts/local-sqs (what make
// emulator runs) in one shell, then the quickstart's block in another, in a fresh directory
// holding only bin/watchbot, in a user's environment built from nothing (testenv.CleanEnv).
// The one change to the block is the emulator's port, which the test picks free, and the
// Ctrl-C the reader gives listen once both messages ran, which the test sends when the queue
// is empty and the DLQ holds the rejected message.
func TestQuickstart(t *testing.T) {
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := quickstartBlock(t, string(readme))
	script := filepath.Join(root, "scripts", "local-sqs")
	if out, err := exec.Command(script, "--install").CombinedOutput(); err != nil {
		testenv.Require(t, "SQS emulator did not install", fmt.Errorf("%w\n%s", err, out))
	}

	clean := testenv.CleanEnv(t)
	emulator := exec.Command(script)
	emulator.Env = append(slices.Clip(clean), "FAUXQS_PORT=0")
	var emuOut testenv.Buffer
	emulator.Stdout, emulator.Stderr = &emuOut, &emuOut
	testenv.Spawn(t, emulator)
	announce := regexp.MustCompile(`SQS emulator on http://127\.0\.0\.1:(\d+)`)
	var port string
	testenv.Eventually(t, "local-sqs to start the emulator", 60*time.Second, func() bool {
		m := announce.FindStringSubmatch(emuOut.String())
		if m != nil && strings.Contains(emuOut.String(), " peek\n") {
			port = m[1]
			return true
		}
		return false
	}, emuOut.String)
	block = strings.ReplaceAll(block, ":4566", ":"+port)

	// The reader's second shell: a fresh directory with the binary make emulator built.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testenv.Binary(t), filepath.Join(dir, "bin", "watchbot")); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "listen.pid")
	listen := regexp.MustCompile(`(?m)^(bin/watchbot listen [^#\n]*?)\s*(#.*)?$`)
	if !listen.MatchString(block) {
		t.Fatalf("the quickstart runs no bin/watchbot listen:\n%s", block)
	}
	// Ctrl-C reaches listen alone; the shell waits for it as it would in the foreground.
	block = listen.ReplaceAllString(block, "$1 & echo $$! > "+pidFile+"; wait $$!")
	shell := exec.Command("bash", "-euo", "pipefail", "-c", block)
	shell.Dir, shell.Env = dir, clean
	var out testenv.Buffer
	shell.Stdout, shell.Stderr = &out, &out
	run := testenv.Spawn(t, shell)

	sqs := testenv.ClientFor("http://127.0.0.1:" + port)
	queue := "http://sqs.us-east-1.localhost:" + port + "/000000000000/jobs"
	dlq := queue + "-dead-letter"
	testenv.Eventually(t, "both messages to run: the queue empty, the rejected one in the DLQ", 90*time.Second, func() bool {
		select {
		case <-run.Done():
			t.Fatalf("the quickstart ended before listen was stopped:\n%s", out.String())
		default:
		}
		if _, err := os.Stat(pidFile); err != nil {
			return false
		}
		return testenv.Depth(t, sqs, queue).Total() == 0 && testenv.Depth(t, sqs, dlq).Visible == 1
	}, out.String)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := run.Wait(t, 60*time.Second, out.String); code != 0 {
		t.Fatalf("the quickstart exited %d:\n%s", code, out.String())
	}
	for _, want := range []string{
		"delete [exit code 0]",                  // try, on a good message
		"dead-letter: worker rejected",          // try, on a bad one
		"resizing photo-1.jpg (attempt 1 of 3)", // listen ran the worker
		"bad-2.jpg",                             // peek shows the rejected message
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the quickstart's output lacks %q:\n%s", want, out.String())
		}
	}
}

// quickstartBlock returns the shell block between the README's quickstart markers.
func quickstartBlock(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "<!-- quickstart: start -->")
	section, _, ok2 := strings.Cut(rest, "<!-- quickstart: end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no quickstart markers")
	}
	_, body, ok := strings.Cut(section, "```sh\n")
	block, _, ok2 := strings.Cut(body, "```")
	if !ok || !ok2 {
		t.Fatal("the README's quickstart has no ```sh block")
	}
	return block
}
