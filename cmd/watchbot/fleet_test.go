package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/limits"
)

// fleetCLI runs `watchbot fleet ARGS --limits-table TABLE` against f's table, and returns its
// exit code and output.
func (f *limitsFleet) fleetCLI(args ...string) (int, string) {
	f.t.Helper()
	return f.fleetCLIEnv(nil, args...)
}

// fleetCLIEnv is fleetCLI with env added to the command's environment.
func (f *limitsFleet) fleetCLIEnv(env []string, args ...string) (int, string) {
	f.t.Helper()
	cmd := f.emu.Watchbot(f.t, append(append([]string{"fleet"}, args...), "--limits-table", f.table)...)
	cmd.Env = append(append(cmd.Env, "AWS_ENDPOINT_URL_DYNAMODB="+f.dynEndpoint()), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode(), out.String()
}

// fleetStatus is `watchbot fleet status --json`.
func (f *limitsFleet) fleetStatus() limits.Tasks {
	f.t.Helper()
	code, out := f.fleetCLI("status", "--json")
	var ts limits.Tasks
	if err := json.Unmarshal([]byte(out), &ts); code != 0 || err != nil {
		f.t.Fatalf("fleet status: exit %d, %v\n%s", code, err, out)
	}
	return ts
}

// startedAfter counts the runs that started after at.
func startedAfter(runs []limitsRun, at time.Time) int {
	n := 0
	for _, r := range runs {
		if r.start.After(at) {
			n++
		}
	}
	return n
}

// bootTime is when the machine booted, to the 10 ms of /proc/uptime: a run's process was made
// at bootTime plus its forked.
func bootTime(t *testing.T) time.Time {
	t.Helper()
	data, err := os.ReadFile("/proc/uptime")
	now := time.Now()
	var up float64
	if err == nil {
		_, err = fmt.Sscan(string(data), &up)
	}
	if err != nil {
		t.Fatalf("read /proc/uptime: %v", err)
	}
	return now.Add(-time.Duration(up * float64(time.Second)))
}

// forkSlack is how far bootTime and the clock ticks of a process's making may put it off.
const forkSlack = 50 * time.Millisecond

// crowdedStarts names the runs whose process a watchbot made after from while most runs of
// its own were under way: a run is under way from its start until its end, which it logs
// before it exits, and so before its watchbot's slot is free again.
func crowdedStarts(runs []limitsRun, boot, from time.Time, most int) []string {
	var out []string
	for _, r := range runs {
		made := boot.Add(r.forked)
		if !made.After(from) {
			continue
		}
		under := 0
		for _, o := range runs {
			if o.watchbot == r.watchbot && o != r && o.start.Before(r.start) && (o.end.IsZero() || o.end.After(made.Add(forkSlack))) {
				under++
			}
		}
		if under >= most {
			out = append(out, fmt.Sprintf("%s (watchbot %d, %d under way)", r.name, r.watchbot, under))
		}
	}
	return out
}

// mostOfOne is the most runs one watchbot had under way at once among those started after at.
func mostOfOne(runs []limitsRun, at time.Time) int {
	most := 0
	for _, r := range runs {
		most = max(most, mostAtOnce(runs, func(o limitsRun) bool { return o.watchbot == r.watchbot && o.start.After(at) }))
	}
	return most
}

// newSteeredFleet starts three watchbots of --concurrency 4 on one queue, their receives
// counted by a proxy, with a 3 s lease, a 2 s --limit-wait and each its own --http-addr, and n
// jobs of a second; it returns once some run.
func newSteeredFleet(t *testing.T, n int) (f *limitsFleet, receives func() int, addrs []string) {
	f = newLimitsFleet(t, 0)
	counter, sqsURL := faultproxy.Serve(t, f.emu.Endpoint, faultproxy.Config{}) // no rules: it only counts
	for range 3 {
		addrs = append(addrs, freeAddr(t))
		f.startOne([]string{limitsLeaseEnv + "=3s"}, "--endpoint-url", sqsURL, "--concurrency", "4", "--limit-wait", "2s", "--http-addr", addrs[len(addrs)-1])
	}
	f.send(bodiesOf(n, "m%d 1"), nil)
	testenv.Eventually(t, "jobs running", 30*time.Second, func() bool { return len(f.runs()) >= 6 }, f.logs)
	return f, func() int { return counter.Stats().Operations["ReceiveMessage"].Requests }, addrs
}

// gauges checks that every task's /metrics shows want, by metric name.
func gauges(t *testing.T, addrs []string, want map[string]float64) {
	t.Helper()
	for i, addr := range addrs {
		families := scrape(t, addr)
		for name, v := range want {
			if got := value(t, families, name); got != v {
				t.Errorf("watchbot %d: %s = %v, want %v", i, name, got, v)
			}
		}
	}
}

// A pause stops every receive and start within 2 s of the command, while the running jobs
// finish and are deleted and the held messages go back past --limit-wait; every task logs
// the change with its reason and who asked, as STS names the caller; status lists three paused tasks; a resume lets work go on; a
// task killed drops out of status within its lease.
func TestFleetPauseResume(t *testing.T) {
	t.Parallel()
	f, receives, addrs := newSteeredFleet(t, 60)
	boot := bootTime(t)
	// The emulator answers STS's GetCallerIdentity too, for the caller's identity.
	code, out := f.fleetCLIEnv([]string{"AWS_ENDPOINT_URL_STS=" + f.emu.Endpoint}, "pause", "--reason", "downstream broken")
	if code != 0 {
		t.Fatalf("pause: exit %d\n%s\n%s", code, out, f.logs())
	}
	pause := f.fleetStatus().Control
	if pause.Change.By == "" {
		t.Errorf("the pause names no caller, with STS at hand: %+v", pause.Change)
	}
	obeyed := pause.Change.At.Add(2 * time.Second)
	time.Sleep(time.Until(obeyed))
	before := receives()
	time.Sleep(2 * time.Second)
	if n := receives() - before; n > 0 {
		t.Errorf("%d receives from 2 s after the pause on, want none", n)
	}
	if late := crowdedStarts(f.runs(), boot, obeyed, 0); len(late) > 0 {
		t.Errorf("jobs started 2 s or more into the pause: %v", late)
	}
	c := f.emu.Client()
	testenv.Eventually(t, "the running jobs deleted and the held messages back", 10*time.Second, func() bool {
		return testenv.Depth(t, c, f.q.URL).InFlight == 0
	}, f.logs)
	if slices.ContainsFunc(f.runs(), func(r limitsRun) bool { return r.end.IsZero() }) {
		t.Error("a job running at the pause did not finish")
	}
	ts := f.fleetStatus()
	if len(ts.Live) != 3 || slices.ContainsFunc(ts.Live, func(r limits.TaskRecord) bool { return !r.AllPaused() || r.Version != pause.Version }) {
		t.Errorf("fleet status in the pause: %+v, want 3 tasks, all paused, applying version %d", ts.Live, pause.Version)
	}
	gauges(t, addrs, map[string]float64{"watchbot_paused": 1, "watchbot_settings_version": float64(pause.Version)})
	for i, o := range f.outs {
		if !testenv.Logged(o.String(), "level", "INFO", "version", fmt.Sprint(pause.Version), "change", limits.ChangePause,
			"reason", "downstream broken", "by", pause.Change.By) {
			t.Errorf("watchbot %d logged no INFO line of the pause with its version, reason and caller", i)
		}
	}

	if code, out := f.fleetCLI("resume"); code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, out)
	}
	resumed := time.Now()
	testenv.Eventually(t, "work going on after the resume", 10*time.Second, func() bool { return startedAfter(f.runs(), resumed) >= 6 }, f.logs)
	gauges(t, addrs, map[string]float64{"watchbot_paused": 0, "watchbot_settings_version": float64(pause.Version + 1)})

	if err := f.procs[0].Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	f.procs[0].Wait(t, 10*time.Second)
	testenv.Eventually(t, "the killed task out of status", 10*time.Second, func() bool { return len(f.fleetStatus().Live) == 2 }, f.logs)
	if d := time.Since(killed); d > 3*time.Second+2*time.Second {
		t.Errorf("the killed task left status %v after the kill, want within its 3 s lease", d)
	}
	f.stop()
}

// A set of --concurrency 1 on tasks running 4 stops no job, and within 2 s holds each task to
// one job at once, which status shows; a set of 0 gives each its own 4 again without a
// restart; a --concurrency above the tasks' own is refused, naming it; a pause --for ends by
// itself.
func TestFleetSetAndPauseFor(t *testing.T) {
	t.Parallel()
	f, _, addrs := newSteeredFleet(t, 150)
	boot := bootTime(t)
	code, out := f.fleetCLI("set", "--concurrency", "1", "--reason", "shed load")
	if code != 0 {
		t.Fatalf("set: exit %d\n%s", code, out)
	}
	ts := f.fleetStatus()
	if len(ts.Live) != 3 || slices.ContainsFunc(ts.Live, func(r limits.TaskRecord) bool { return r.Applied.Concurrency != 1 }) {
		t.Errorf("fleet status after the set: %+v, want 3 tasks running by --concurrency 1", ts.Live)
	}
	set := ts.Control.Change.At
	gauges(t, addrs, map[string]float64{"watchbot_concurrency_limit": 1})
	testenv.Eventually(t, "every run of before the set ended", 10*time.Second, func() bool {
		return !slices.ContainsFunc(f.runs(), func(r limitsRun) bool { return r.end.IsZero() && r.start.Before(set) })
	}, f.logs)
	time.Sleep(3 * time.Second)
	if crowded := crowdedStarts(f.runs(), boot, set.Add(2*time.Second), 1); len(crowded) > 0 {
		t.Errorf("jobs started 2 s or more after --concurrency 1 while another of their task ran: %v", crowded)
	}

	if code, out := f.fleetCLI("set", "--concurrency", "0"); code != 0 {
		t.Fatalf("set back to each task's own: exit %d\n%s", code, out)
	}
	raised := time.Now()
	testenv.Eventually(t, "a task running more than one job once back to its own 4", 10*time.Second, func() bool {
		return mostOfOne(f.runs(), raised) > 1
	}, f.logs)
	gauges(t, addrs, map[string]float64{"watchbot_concurrency_limit": 4})
	if code, out := f.fleetCLI("set", "--concurrency", "8"); code != 2 || !strings.Contains(out, "--concurrency 8") {
		t.Errorf("a --concurrency above the tasks' own: exit %d, want 2 naming it\n%s", code, out)
	}

	asked := time.Now() // the pause ends 4 s after the command read its clock, after this
	if code, out := f.fleetCLI("pause", "--for", "4s"); code != 0 {
		t.Fatalf("pause --for: exit %d\n%s", code, out)
	}
	acked := time.Now()
	testenv.Eventually(t, "work going on once the pause --for 4s ended", 15*time.Second, func() bool {
		return startedAfter(f.runs(), asked.Add(4*time.Second)) > 0
	}, f.logs)
	if n := startedAfter(f.runs(), acked.Add(300*time.Millisecond)) - startedAfter(f.runs(), asked.Add(4*time.Second)); n > 0 {
		t.Errorf("%d jobs started in the pause --for 4s", n)
	}
	f.stop()
}

// A task that cannot reach the table keeps the pause it last read, and says so in its log
// (the version it keeps, and its queues paused) and in /readyz.
func TestFleetPauseOutlivesAnUnreachableTable(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0)
	proxy, dynURL := faultproxy.Serve(t, f.dynEndpoint(), faultproxy.Config{})
	addr := freeAddr(t)
	f.startOne([]string{"AWS_ENDPOINT_URL_DYNAMODB=" + dynURL}, "--http-addr", addr)
	f.send(bodiesOf(4, "m%d 0"), nil)
	f.waitDone(4, 30*time.Second)
	if code, out := f.fleetCLI("pause"); code != 0 {
		t.Fatalf("pause: exit %d\n%s", code, out)
	}
	version := f.fleetStatus().Control.Version
	if err := proxy.SetRules([]faultproxy.Rule{{Operations: []string{faultproxy.AnyOperation}, Fault: faultproxy.ServerError, Rate: 1}}); err != nil {
		t.Fatal(err)
	}
	f.send(bodiesOf(2, "late%d 0"), nil)
	testenv.Eventually(t, "/readyz saying the table is unreachable", 15*time.Second, func() bool {
		code, body := probe(addr, "/readyz")
		return code == 200 && strings.Contains(body["limitsTable"], "unreachable")
	}, f.logs)
	if n := len(f.runs()); n != 4 {
		t.Errorf("%d runs, want the 4 of before the pause: the pause did not hold without the table", n)
	}
	if !testenv.Logged(f.outs[0].String(), "level", "WARN", "control_version", fmt.Sprint(version), "paused_queues", fmt.Sprint([]string{queueattr.NameFromURL(f.q.URL)})) {
		t.Errorf("no WARN line saying the task keeps version %d and its queue paused\n%s", version, f.logs())
	}
	f.stop()
}
