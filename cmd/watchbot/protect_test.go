package main

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/testing/fakeagent"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// sleepWorker writes a worker that sleeps for its body's seconds and records in dir/trace
// "start BODY UNIXNANO" and "end BODY UNIXNANO".
func sleepWorker(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "worker.sh")
	script := `#!/bin/sh
echo "start $Message $(date +%s%N)" >> "` + dir + `/trace"
sleep "$Message"
echo "end $Message $(date +%s%N)" >> "` + dir + `/trace"
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// traceTimes returns when each "start BODY" and "end BODY" line of dir/trace was written.
func traceTimes(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	data, _ := os.ReadFile(filepath.Join(dir, "trace"))
	out := map[string]time.Time{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("trace line %q: %v", line, err)
		}
		out[f[0]+" "+f[1]] = time.Unix(0, ns)
	}
	return out
}

// TestListenProtectsTheTaskWhileJobsRun runs the binary with a fake ECS agent: the task is
// unprotected while idle, protected from before a job's start to its end, renewed before the
// grant lapses, unprotected after the idle hold, and unprotected once a SIGTERM drain has let
// the running job finish.
func TestListenProtectsTheTaskWhileJobsRun(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dir := t.TempDir()
	agent := fakeagent.Start()
	t.Cleanup(agent.Close)
	// The agent grants seconds (it would grant minutes): renewals come every 5 s, once half
	// the grant is left; the calls stay 5 s apart.
	agent.SetGrant(testGrant)
	cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--scale-in-protection", "on",
		"--scale-in-protection-idle", "1s", "--log-level", "debug", "--", sleepWorker(t, dir))
	cmd.Env = append(cmd.Env, ecsagent.EnvURI+"="+agent.URI())
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	p := testenv.Spawn(t, cmd)
	testenv.Eventually(t, "watchbot to listen", 30*time.Second, func() bool { return listening(stderr.String()) }, stderr.String)
	time.Sleep(500 * time.Millisecond)
	if calls := agent.Calls(); len(calls) != 0 {
		t.Fatalf("an idle watchbot called the agent: %+v", calls)
	}

	// A 13-second job: protected throughout, renewed on the way.
	send(t, c, q.URL, "13")
	testenv.Eventually(t, "the job to end", 30*time.Second, func() bool { return !traceTimes(t, dir)["end 13"].IsZero() }, stderr.String)
	times := traceTimes(t, dir)
	calls := agent.Calls()
	protectedThroughout(t, calls, times["start 13"], times["end 13"], stderr.String)
	renewals := 0
	for _, call := range calls {
		if call.Enabled && call.At.After(times["start 13"]) {
			renewals++
		}
	}
	if renewals < 2 {
		t.Errorf("%d renewals during a 13 s job with %v grants, want 2 or more: %+v", renewals, testGrant, calls)
	}
	// Idle: unprotected after the 1 s hold (and the 5 s between calls).
	testenv.Eventually(t, "protection to be dropped after the idle hold", 15*time.Second, func() bool {
		calls := agent.Calls()
		return len(calls) > 0 && !calls[len(calls)-1].Enabled
	}, stderr.String)
	if last := agent.Calls()[len(agent.Calls())-1]; last.At.Before(times["end 13"].Add(time.Second)) {
		t.Errorf("unprotected at %v, before the idle hold after the job's end at %v", last.At, times["end 13"])
	}
	if testenv.Depth(t, c, q.URL).Total() != 0 {
		t.Errorf("the message was not deleted")
	}

	// SIGTERM during a job: the drain lets it finish, and only then is protection dropped.
	send(t, c, q.URL, "3")
	testenv.Eventually(t, "the second job to start", 30*time.Second, func() bool { return !traceTimes(t, dir)["start 3"].IsZero() }, stderr.String)
	testenv.Eventually(t, "the task to be protected", 10*time.Second, agent.Protected, stderr.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 60*time.Second, stderr.String); code != 0 {
		t.Fatalf("exit %d after SIGTERM; logs:\n%s", code, stderr.String())
	}
	times = traceTimes(t, dir)
	calls = agent.Calls()
	last := calls[len(calls)-1]
	if last.Enabled || agent.Protected() {
		t.Fatalf("still protected after the drain; calls %+v", calls)
	}
	if times["end 3"].IsZero() || last.At.Before(times["end 3"]) {
		t.Errorf("protection dropped at %v, before the drained job ended at %v", last.At, times["end 3"])
	}
	protectedThroughout(t, calls, times["start 3"], times["end 3"], stderr.String)
	// The protection is logged at INFO and its renewals at DEBUG, each with its expiry; the
	// agent's calls above show it dropped.
	for _, level := range []string{"INFO", "DEBUG"} {
		if !testenv.Logged(stderr.String(), "level", level, "expires", "*") {
			t.Errorf("no %s record of the protection's expiry:\n%s", level, stderr.String())
		}
	}
}

// testGrant is how long the fake agent protects the task for.
const testGrant = 10 * time.Second

// protectedThroughout checks that the calls kept the task protected while a job ran, from
// a moment after its start (the call is made beside the work, never before it) to its end:
// each protect covers testGrant, or up to the unprotect that follows it.
func protectedThroughout(t *testing.T, calls []fakeagent.Call, start, end time.Time, logs func() string) {
	t.Helper()
	const slack = time.Second
	type span struct{ from, to time.Time }
	var spans []span
	for i, call := range calls {
		if !call.Enabled {
			continue
		}
		sp := span{call.At, call.At.Add(testGrant)}
		if j := slices.IndexFunc(calls[i+1:], func(c fakeagent.Call) bool { return !c.Enabled }); j >= 0 && calls[i+1+j].At.Before(sp.to) {
			sp.to = calls[i+1+j].At
		}
		spans = append(spans, sp)
	}
	for at := start.Add(slack); at.Before(end); {
		next := at
		for _, sp := range spans {
			if !sp.from.After(at) && sp.to.After(next) {
				next = sp.to
			}
		}
		if next == at {
			t.Fatalf("the job from %v to %v was not protected at %v: calls %+v\n%s",
				start.Format(time.StampMilli), end.Format(time.StampMilli), at.Format(time.StampMilli), calls, logs())
		}
		at = next
	}
}

// TestListenWorksOnWhenTheAgentFails runs jobs while the agent answers 500, a failure body,
// not at all, or is not there: every message is processed at once, the failures are logged
// and counted in ScaleInProtectionErrors.
func TestListenWorksOnWhenTheAgentFails(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	refused := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "http://" + addr + "/api/task"
	}
	for _, tc := range []struct {
		name  string
		fault fakeagent.Fault
		uri   func(*testing.T) string // nil: the fake agent
	}{
		{name: "500", fault: fakeagent.Status},
		{name: "failure body", fault: fakeagent.Failure},
		{name: "standalone task", fault: fakeagent.NotInService},
		{name: "hang", fault: fakeagent.Hang},
		{name: "connection refused", uri: refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := emu.Client()
			q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
			dir := t.TempDir()
			agent := fakeagent.Start()
			t.Cleanup(agent.Close)
			agent.SetFault(tc.fault)
			uri := agent.URI()
			if tc.uri != nil {
				uri = tc.uri(t)
			}
			cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--concurrency", "4", "--metrics", "emf", "--", sleepWorker(t, dir))
			cmd.Env = append(cmd.Env, ecsagent.EnvURI+"="+uri) // --scale-in-protection auto
			var stdout, stderr testenv.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			p := testenv.Spawn(t, cmd)
			bodies := []string{"0", "0", "0", "0", "0", "0"}
			send(t, c, q.URL, bodies...)
			testenv.Eventually(t, "every message to be processed", 30*time.Second, func() bool {
				return testenv.Depth(t, c, q.URL).Total() == 0
			}, stderr.String)
			done := time.Now()
			if tc.fault == fakeagent.Hang {
				// The work did not wait for the first call, which hangs for the call timeout.
				first := agent.Calls()[0].At
				if !done.Before(first.Add(app.ProtectCallTimeout)) {
					t.Errorf("the queue drained at %v, not before the hung call from %v timed out", done, first)
				}
			}
			if n := strings.Count(traceText(t, dir), "end 0"); n != len(bodies) {
				t.Errorf("%d runs, want %d", n, len(bodies))
			}
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			if code := p.Wait(t, 60*time.Second, stderr.String); code != 0 {
				t.Fatalf("exit %d; logs:\n%s", code, stderr.String())
			}
			if tc.fault == fakeagent.NotInService {
				if n := len(agent.Calls()); n != 1 {
					t.Errorf("%d calls for a standalone task, want 1", n)
				}
			} else if !testenv.Logged(stderr.String(), "level", "WARN", "enable", "*", "consecutive_failures", "*") {
				t.Errorf("the agent's failure was not logged:\n%s", stderr.String())
			}
			if !strings.Contains(stdout.String(), `"ScaleInProtectionErrors"`) {
				t.Errorf("no ScaleInProtectionErrors in the metrics:\n%s", stdout.String())
			}
			if n := testenv.Depth(t, c, q.DLQURL).Total(); n != 0 {
				t.Errorf("%d messages dead-lettered", n)
			}
		})
	}
}

func traceText(t *testing.T, dir string) string {
	t.Helper()
	data, _ := os.ReadFile(filepath.Join(dir, "trace"))
	return string(data)
}

func send(t *testing.T, c *sqs.Client, url string, bodies ...string) {
	t.Helper()
	if _, err := testenv.Send(t.Context(), c, url, bodies, nil); err != nil {
		t.Fatal(err)
	}
}
