//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// inMounts turns cmd (a watchbot command from emu.Watchbot) into the same command run in a
// mount namespace of its own, after mounts (mount(8) arguments, one mount each) are made
// there: the container's file systems, for this process alone. watchbot keeps the pid of cmd.
func inMounts(cmd *exec.Cmd, mounts ...string) {
	script := ""
	for _, m := range mounts {
		script += "mount " + m + " && "
	}
	args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script + `exec "$@"`, "sh"}, cmd.Args...)
	cmd.Path, cmd.Args = "unshare", append([]string{"unshare"}, args...)
	if p, err := exec.LookPath("unshare"); err == nil {
		cmd.Path = p
	}
}

// listen where the temporary directories are read-only: a read-only $TMPDIR alone stops
// nothing while /dev/shm takes files; with /dev/shm read-only too, listen refuses to start,
// naming --temp-dir, and receives nothing.
func TestListenTempDirs(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t, "mounting read-only file systems")
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dir := t.TempDir()
	readOnly := filepath.Join(dir, "tmp")
	if err := os.Mkdir(readOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(dir, "w.sh")
	// The worker notes where its message file is, and that it read its body.
	script := "#!/bin/sh\nread body\necho \"$WATCHBOT_MESSAGE_FILE $body\" > " + dir + "/ran\n"
	if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	roTmpfs := "-t tmpfs -o ro,size=1m tmpfs "

	t.Run("read-only TMPDIR, writable /dev/shm: it runs", func(t *testing.T) {
		if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("job")}); err != nil {
			t.Fatal(err)
		}
		cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--", worker)
		cmd.Env = append(cmd.Env, "TMPDIR="+readOnly)
		inMounts(cmd, "-t tmpfs -o size=64m tmpfs /dev/shm", roTmpfs+readOnly)
		out := &testenv.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		p := testenv.Spawn(t, cmd)
		waitFile(t, filepath.Join(dir, "ran"))
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0 after a drain; output:\n%s", code, out)
		}
		ran, _ := os.ReadFile(filepath.Join(dir, "ran"))
		if !strings.HasPrefix(string(ran), "/dev/shm/watchbot-") || !strings.HasSuffix(string(ran), " job\n") {
			t.Errorf("the worker saw %q, want its body in a message file in /dev/shm", ran)
		}
		if !strings.Contains(out.String(), "$TMPDIR cannot be written") {
			t.Errorf("no warning that nothing can spill; output:\n%s", out)
		}
		if n := testenv.Depth(t, c, q.URL).Total(); n != 0 {
			t.Errorf("%d messages left, want 0 (deleted)", n)
		}
	})

	t.Run("read-only TMPDIR and /dev/shm: exit 2 naming --temp-dir", func(t *testing.T) {
		if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("untouched")}); err != nil {
			t.Fatal(err)
		}
		cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--", worker)
		cmd.Env = append(cmd.Env, "TMPDIR="+readOnly)
		inMounts(cmd, roTmpfs+"/dev/shm", roTmpfs+readOnly)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("exit %v, want code 2; output:\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, "watchbot: --temp-dir: no directory can hold the jobs' files") ||
			!strings.Contains(last, "read-only file system") {
			t.Errorf("last line %q, want the refusal of --temp-dir", last)
		}
		neverReceived(t, c, q.URL)
	})
}
