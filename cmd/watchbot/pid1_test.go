//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// listenAsPID1 starts `watchbot listen ARGS` as PID 1 of a new PID namespace, as a container
// runtime starts its entrypoint, with an environment built from nothing (testenv.CleanEnv)
// but the emulator's. It returns the process (unshare, outside the namespace), watchbot's output
// and the pid, as this process sees it, of the namespace's PID 1.
func listenAsPID1(t *testing.T, emu *testenv.Emulator, args ...string) (*testenv.Process, *testenv.Buffer, int) {
	t.Helper()
	testenv.RequireRoot(t, "running watchbot as PID 1 of a PID namespace")
	cmd := testenv.AsPID1(testenv.Binary(t), append([]string{"listen"}, args...)...)
	cmd.Env = testenv.CleanEnv(t, append(emu.Env(), testenv.ShortPoll)...)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p := testenv.Spawn(t, cmd)
	return p, out, testenv.NamespaceInit(t, p.Cmd.Process.Pid, 10*time.Second)
}

// stopPID1 sends SIGTERM to the namespace's PID 1, as `docker stop` does, and expects the
// clean drain's exit 0 from it.
func stopPID1(t *testing.T, p *testenv.Process, init int, logs *testenv.Buffer) {
	t.Helper()
	if err := syscall.Kill(init, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, 60*time.Second, logs.String); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; logs:\n%s", code, logs.String())
	}
}

// checkReaped fails t when an orphan's zombie lasted a second: PID 1 reaps each as it dies.
// Orphans that die together are zombies together until PID 1 runs, so the number at once
// depends on the machine's load, and is logged. (Each worker's group is killed as it exits,
// so its orphans die then, and are handed to PID 1.)
func checkReaped(t *testing.T, most testenv.ZombieCounts) {
	t.Helper()
	t.Logf("zombies at once: at most %d orphans, %d in all; an orphan's zombie lasted at most %v (%d samples of the namespace's /proc)",
		most.Orphans, most.All, most.Longest, most.Samples)
	if most.Longest >= time.Second {
		t.Errorf("an orphan's zombie lasted %v: PID 1 does not reap what is handed to it", most.Longest)
	}
}

// TestPID1ReapsOrphans: a worker that leaves a child behind, run as a container's only process
// runs it, leaves no zombie: watchbot, as PID 1, reaps every orphan handed to it.
func TestPID1ReapsOrphans(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bodies := make([]string, 20)
	for i := range bodies {
		bodies[i] = "job " + strconv.Itoa(i)
	}
	p, logs, init := listenAsPID1(t, emu, "--queue-url", q.URL, "--metrics", "none", "--", "sh", "-c", "( sleep 0.2 ) & exit 0")
	zombies := testenv.SampleZombies(init)
	if _, err := testenv.Send(t.Context(), c, q.URL, bodies, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the 20 jobs", 60*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, logs.String)
	testenv.Eventually(t, "no zombie left", 10*time.Second, func() bool { return len(testenv.NamespaceZombies(init)) == 0 },
		func() string { return fmt.Sprint(testenv.NamespaceZombies(init)) })
	checkReaped(t, zombies.Stop())
	stopPID1(t, p, init, logs)
}

// TestPID1OrphanFloodOutcomes: under a flood of orphans, which PID 1 reaps as they come, every
// worker's own exit code still reaches the supervisor, so every message's outcome is exact.
// Each worker leaves 3 orphans and exits with the code its message names on the first attempt
// (0 ack, 3 dead-letter, 4 release, 1 failure), 0 on any later one.
func TestPID1OrphanFloodOutcomes(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 5, VisibilityTimeout: 30 * time.Second})
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	worker := filepath.Join(dir, "worker.sh")
	script := `#!/bin/sh
sleep 0.1 & sleep 0.1 & sleep 0.1 &
set -- $Message
code=$2
if [ "$WATCHBOT_ATTEMPT" -gt 1 ]; then code=0; fi
echo "$1 $WATCHBOT_ATTEMPT $code" >> ` + runs + `
exit $code
`
	if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	codes := []int{0, 3, 4, 1}
	const jobs = 200
	bodies := make([]string, jobs)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("%d %d", i, codes[i%len(codes)])
	}
	p, logs, init := listenAsPID1(t, emu, "--queue-url", q.URL, "--concurrency", "8", "--backoff-base", "1s",
		"--visibility-timeout", "30s", "--metrics", "none", "--", worker)
	zombies := testenv.SampleZombies(init)
	start := time.Now()
	if _, err := testenv.Send(t.Context(), c, q.URL, bodies, nil); err != nil {
		t.Fatal(err)
	}
	// Every job runs once, and the released and failed ones once more.
	wantRuns := jobs + jobs/2
	lines := func() []string {
		data, _ := os.ReadFile(runs)
		return strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	testenv.Eventually(t, "every run", 180*time.Second, func() bool {
		return len(lines()) >= wantRuns && testenv.Depth(t, c, q.URL).Total() == 0
	}, logs.String)
	t.Logf("%d runs in %v", len(lines()), time.Since(start).Round(100*time.Millisecond))

	got := map[int][]string{} // job → "attempt code" of each run, in order
	for _, l := range lines() {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("bad record %q", l)
		}
		i, _ := strconv.Atoi(f[0])
		got[i] = append(got[i], f[1]+" "+f[2])
	}
	dlq := map[int]bool{}
	for _, m := range testenv.Drain(t, c, q.DLQURL, 10*time.Second) {
		i, _ := strconv.Atoi(strings.Fields(aws.ToString(m.Body))[0])
		dlq[i] = true
	}
	for i := range jobs {
		code := codes[i%len(codes)]
		want := []string{"1 " + strconv.Itoa(code)}
		if code == 4 || code == 1 {
			want = append(want, "2 0")
		}
		if !slices.Equal(got[i], want) {
			t.Errorf("job %d (exit %d): runs %q, want %q", i, code, got[i], want)
		}
		if dlq[i] != (code == 3) {
			t.Errorf("job %d (exit %d): in the DLQ %v, want %v", i, code, dlq[i], code == 3)
		}
	}
	if len(dlq) != jobs/4 {
		t.Errorf("%d messages in the DLQ, want %d", len(dlq), jobs/4)
	}
	testenv.Eventually(t, "no zombie left", 10*time.Second, func() bool { return len(testenv.NamespaceZombies(init)) == 0 },
		func() string { return fmt.Sprint(testenv.NamespaceZombies(init)) })
	checkReaped(t, zombies.Stop())
	stopPID1(t, p, init, logs)
}
