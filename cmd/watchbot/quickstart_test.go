//go:build linux

package main

import (
	"fmt"
	"maps"
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

// TestQuickstart runs the README's quickstart as a reader would: make emulator's
// scripts/local-sqs in one shell, then the quickstart's block in another (runLocalBlock).
func TestQuickstart(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := markedBlocks(t, string(readme), "quickstart")[0]
	emu := startLocalEmulator(t)
	_, out := emu.runLocalBlock(t, block)
	for _, want := range []string{
		"delete [exit code 0]",                  // try, on a good message
		"dead-letter: worker rejected",          // try, on a bad one
		"resizing photo-1.jpg (attempt 1 of 3)", // listen ran the worker
		"bad-2.jpg",                             // peek shows the rejected message
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the quickstart's output lacks %q:\n%s", want, out)
		}
	}
}

// localEmulator is scripts/local-sqs (make emulator) running on free ports.
type localEmulator struct {
	sqsPort, dynamoPort string
	// queues are the work queues' URLs, by name.
	queues map[string]string
}

var localAnnounce = regexp.MustCompile(`SQS and S3 on http://127\.0\.0\.1:(\d+), DynamoDB on http://127\.0\.0\.1:(\d+)`)

// startLocalEmulator runs scripts/local-sqs with vars (the page's make emulator VAR=VALUE) in a
// user's environment, on free ports, until the test ends.
func startLocalEmulator(t *testing.T, vars ...string) *localEmulator {
	t.Helper()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "local-sqs")
	if out, err := exec.Command(script, "--install").CombinedOutput(); err != nil {
		testenv.Require(t, "the emulators did not install", fmt.Errorf("%w\n%s", err, out))
	}
	cmd := exec.Command(script)
	cmd.Env = append(testenv.CleanEnv(t, vars...), "FAUXQS_PORT=0", "DYNALITE_PORT=0")
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	run := testenv.Spawn(t, cmd)
	emu := &localEmulator{queues: map[string]string{}}
	testenv.Eventually(t, "local-sqs to start the emulators", 60*time.Second, func() bool {
		select {
		case <-run.Done():
			t.Fatalf("local-sqs exited:\n%s", out.String())
		default:
		}
		m := localAnnounce.FindStringSubmatch(out.String())
		if m == nil || !strings.Contains(out.String(), "  export ") {
			return false
		}
		emu.sqsPort, emu.dynamoPort = m[1], m[2]
		return true
	}, out.String)
	for line := range strings.Lines(out.String()) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "queue" {
			emu.queues[f[1]] = f[2]
		}
	}
	return emu
}

var localListen = regexp.MustCompile(`(?m)^(bin/watchbot listen [^#\n]*?)\s*(#.*)?$`)

// runLocalBlock runs a docs block as its reader would in a second shell: in a fresh directory
// holding only bin/watchbot, in a user's environment built from nothing (testenv.CleanEnv),
// with bash -euo pipefail. The one change to the block is the emulators' ports, which the
// test picks free, and the Ctrl-C the reader gives each bin/watchbot listen once its work is
// done, which the test sends when every work queue is empty (whatever went to a DLQ went
// there); the shell's environment adds testenv.ShortPoll, so that Ctrl-C stops an idle
// listen within 2 s. It returns the directory and what the block printed, and fails the test unless the
// block exits 0.
func (emu *localEmulator) runLocalBlock(t *testing.T, block string) (dir, out string) {
	t.Helper()
	block = strings.ReplaceAll(block, ":4566", ":"+emu.sqsPort)
	block = strings.ReplaceAll(block, ":4567", ":"+emu.dynamoPort)
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testenv.Binary(t), filepath.Join(dir, "bin", "watchbot")); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "listen.pid")
	// Ctrl-C reaches listen alone; the shell waits for it as it would in the foreground.
	block = localListen.ReplaceAllString(block, "$1 & echo $$! > "+pidFile+"; wait $$!; rm "+pidFile)
	shell := exec.Command("bash", "-euo", "pipefail", "-c", block)
	shell.Dir, shell.Env = dir, testenv.CleanEnv(t, testenv.ShortPoll)
	var output testenv.Buffer
	shell.Stdout, shell.Stderr = &output, &output
	run := testenv.Spawn(t, shell)
	ended := func() bool {
		select {
		case <-run.Done():
			return true
		default:
			return false
		}
	}
	sqs := testenv.ClientFor("http://127.0.0.1:" + emu.sqsPort)
	for {
		var pid int
		testenv.Eventually(t, "the block to start a listen or end", 90*time.Second, func() bool {
			if ended() {
				return true
			}
			b, err := os.ReadFile(pidFile)
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		}, output.String)
		if pid == 0 {
			break
		}
		testenv.Eventually(t, "every work queue to empty", 90*time.Second, func() bool {
			return !slices.ContainsFunc(slices.Collect(maps.Values(emu.queues)), func(url string) bool {
				return testenv.Depth(t, sqs, url).Total() != 0
			})
		}, output.String)
		if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the listen to stop", 60*time.Second, func() bool {
			_, err := os.Stat(pidFile)
			return ended() || os.IsNotExist(err)
		}, output.String)
	}
	if code := run.Wait(t, 60*time.Second, output.String); code != 0 {
		t.Fatalf("the block exited %d:\n%s", code, output.String())
	}
	return dir, output.String()
}

// markedBlocks returns the ```sh blocks of text between the markers <!-- NAME: start --> and
// <!-- NAME: end -->.
func markedBlocks(t *testing.T, text, name string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "<!-- "+name+": start -->")
	section, _, ok2 := strings.Cut(rest, "<!-- "+name+": end -->")
	if !ok || !ok2 {
		t.Fatalf("no %s markers", name)
	}
	var blocks []string
	for {
		_, body, ok := strings.Cut(section, "```sh\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(body, "```")
		if !ok {
			t.Fatalf("the %s section has an unclosed ```sh block", name)
		}
		blocks, section = append(blocks, block), after
	}
	if len(blocks) == 0 {
		t.Fatalf("the %s section has no ```sh block", name)
	}
	return blocks
}
