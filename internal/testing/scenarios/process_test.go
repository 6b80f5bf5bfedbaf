//go:build linux

package scenarios

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sys/unix"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// procStatus reads fields (VmRSS, VmHWM, Threads) of /proc/PID/status, in kB for sizes.
func procStatus(pid int) (map[string]int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				out[name] = n
			}
		}
	}
	return out, nil
}

// openFDs counts /proc/PID/fd.
func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// mono is CLOCK_MONOTONIC in nanoseconds, as testworker writes it.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// TestScenario3SupervisorKilled: the supervisor binary is SIGKILLed mid-run and started
// again. Runs that were under way come back after their visibility timeout and run once
// more; runs that had finished and been deleted do not run again.
func TestScenario3SupervisorKilled(t *testing.T) {
	tests := []struct {
		name string
		seed int64
		// killAt is how many runs have started when the kill comes.
		killAt int
		// container also kills the workers, as a container's stop does; otherwise they
		// are orphaned and go on, as after `kill -9` of the supervisor on a host.
		container bool
		// n messages run job, a sleep of about ms milliseconds (ms/2 to 3ms/2).
		n, ms int
	}{
		{"container", 1, 5, true, 16, 1500},
		{"container", 2, 8, true, 16, 1200},
		{"container", 3, 11, true, 16, 1800},
		// Orphaned workers that outlive the lease: the redelivered copy must not run while
		// the orphan still does.
		{"supervisor-only", 4, 4, false, 4, 7000},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/seed=%d", tc.name, tc.seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, testenv.QueueOptions{MaxReceiveCount: 5}, tc.seed, nil)
			r := rand.New(rand.NewPCG(uint64(tc.seed), 3))
			var keys, bodies []string
			for i := range tc.n {
				k := fmt.Sprintf("s3-%s-%d-%d", tc.name, tc.seed, i)
				// Durations vary around ms, so runs end at different times.
				keys = append(keys, k)
				bodies = append(bodies, body(k, fmt.Sprintf("sleep:%d", tc.ms/2+r.IntN(tc.ms))))
			}
			w.sendBodies(bodies)
			args := []string{"--concurrency", "4", "--visibility-timeout", "3s", "--backoff-base", "1s", "--kill-grace", "1s"}
			first := w.binary(args...)
			w.eventually(fmt.Sprintf("%d runs started", tc.killAt), 60*time.Second, func() bool {
				n := 0
				for _, rs := range w.readTrace().runs {
					n += len(rs)
				}
				return n >= tc.killAt
			})
			killed := mono()
			if err := first.Cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-first.Done()
			orphans := w.unfinished()
			if tc.container {
				for _, pid := range orphans {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
				}
			}
			t.Logf("killed the supervisor with %d runs under way", len(orphans))

			w.emptyThenStop(w.binary(args...), 90*time.Second)
			// A run that had not ended a moment before the kill may not have been deleted.
			const ackWindow = int64(time.Second)
			got := w.verify(keys, verifyOpts{excuse: func(r *run) string {
				if r.start < killed && (r.end == 0 || r.end > killed-ackWindow) {
					return "under way when the supervisor was killed"
				}
				return ""
			}})
			t.Log(got)
			td := w.readTrace()
			for _, k := range keys {
				runs := td.runs[k]
				var before, after int
				for _, r := range runs {
					if r.start < killed {
						before++
					} else {
						after++
					}
				}
				if (after > 1 || before > 1) && !lapsed(w, runs) {
					t.Errorf("%s ran %d times before the kill and %d after, want at most once each", k, before, after)
				}
				if before == 1 && runs[0].end != 0 && runs[0].end < killed-ackWindow && after > 0 {
					t.Errorf("%s finished well before the kill and ran again after it", k)
				}
			}
			if got.Succeeded != len(keys) {
				t.Errorf("%d of %d messages succeeded, want all", got.Succeeded, len(keys))
			}
		})
	}
}

// TestScenario4SIGTERMWithJobsRunning: SIGTERM with 8 jobs running; half finish inside
// --shutdown-timeout, half do not. The finished are deleted, the others stopped and
// released (visible again at once), no new message is received, and watchbot exits 0.
func TestScenario4SIGTERMWithJobsRunning(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, testenv.QueueOptions{MaxReceiveCount: 5}, seed, nil)
			r := rand.New(rand.NewPCG(uint64(seed), 4))
			var keys, bodies []string
			short := map[string]bool{}
			for i, slow := range r.Perm(8) {
				k := fmt.Sprintf("s4-%d-%d", seed, i)
				plan := fmt.Sprintf("sleep:%d", 500+r.IntN(1500)) // ends inside the 3 s window
				if slow >= 4 {
					plan = "hang"
				} else {
					short[k] = true
				}
				keys, bodies = append(keys, k), append(bodies, body(k, plan))
			}
			// Messages beyond the eight must not be received once the stop began.
			var extra []string
			for i := range 4 {
				extra = append(extra, body(fmt.Sprintf("s4-%d-extra-%d", seed, i), "ok"))
			}
			w.sendBodies(bodies)
			p := w.binary("--concurrency", "8", "--shutdown-timeout", "3s", "--kill-grace", "1s", "--visibility-timeout", "30s")
			w.eventually("eight jobs running", 60*time.Second, func() bool { return len(w.readTrace().runs) == 8 })
			w.sendBodies(extra)
			began := time.Now()
			if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.Wait(t, 15*time.Second, w.logs.tail); code != 0 {
				t.Errorf("exit code %d after the drain, want 0; log tail:\n%s", code, w.logs.tail())
			}
			took := time.Since(began)
			if took > 3*time.Second+time.Second+2*time.Second {
				t.Errorf("drain took %v, want about --shutdown-timeout + --kill-grace (4s)", took)
			}
			// Released messages are visible at once; the extra ones were never received.
			out, err := w.direct.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.q.URL),
				MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 600})
			if err != nil {
				t.Fatal(err)
			}
			visible := map[string]bool{}
			for _, m := range out.Messages {
				visible[keyOf(aws.ToString(m.Body))] = true
			}
			td := w.readTrace()
			for _, k := range keys {
				runs := td.runs[k]
				switch {
				case len(runs) != 1:
					t.Errorf("%s ran %d times, want once", k, len(runs))
				case short[k] && (runs[0].result != "ok" || visible[k]):
					t.Errorf("%s finished inside the window (result %q) but is visible=%v, want deleted", k, runs[0].result, visible[k])
				case !short[k] && !visible[k]:
					t.Errorf("%s was stopped at shutdown but is not visible at once: not released", k)
				}
			}
			if len(visible) != 4+len(extra) {
				t.Errorf("%d messages visible right after the drain, want the 4 released and the %d never received", len(visible), len(extra))
			}
			if n := w.logs.count("worker stopped by watchbot"); n != 4 {
				t.Errorf("%d jobs logged as stopped by watchbot, want 4", n)
			}
			for _, o := range td.overlaps {
				t.Errorf("concurrent duplicate: %s", o)
			}
			t.Logf("drain took %v", took.Round(time.Millisecond))
		})
	}
}

// TestScenario5MisbehavingWorkers: workers that hang, SIGKILL themselves, fork children that
// outlive them, close stdout early, or write 100 MiB to stdout. Every message ends deleted
// (after a retry for the first two), no child is left running, and the supervisor's memory
// does not grow with the flood.
func TestScenario5MisbehavingWorkers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		concurrency string
	}{{"all-at-once", "5"}, {"one-at-a-time", "1"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, testenv.QueueOptions{MaxReceiveCount: 5}, 0, nil)
			plans := map[string][]string{
				"hang":     {"hang", "ok"},
				"oom":      {"sigkill", "ok"},
				"fork":     {"fork:120000"},
				"closeout": {"closeout"},
				"flood":    {"flood:100"},
			}
			var keys, bodies []string
			for _, name := range []string{"hang", "oom", "fork", "closeout", "flood"} {
				k := "s5-" + tc.name + "-" + name
				keys, bodies = append(keys, k), append(bodies, body(k, plans[name]...))
			}
			p := w.binary("--concurrency", tc.concurrency, "--max-job-duration", "2s", "--kill-grace", "1s",
				"--visibility-timeout", "10s", "--backoff-base", "1s")
			w.eventually("watchbot listening", 30*time.Second, func() bool { return w.logs.count("watchbot listening") == 1 })
			pid := p.Cmd.Process.Pid
			base, err := procStatus(pid)
			if err != nil {
				t.Fatal(err)
			}
			w.sendBodies(bodies)
			w.eventually("every message done", 90*time.Second, func() bool {
				return w.depth(w.q.URL) == 0 && w.logs.count("message done") == len(keys)
			})
			peak, err := procStatus(pid)
			if err != nil {
				t.Fatal(err)
			}
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			if code := p.Wait(t, 30*time.Second, w.logs.tail); code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
			got := w.verify(keys, verifyOpts{})
			t.Log(got)
			if got.Deleted != len(keys) {
				t.Errorf("%d of %d messages deleted, want all", got.Deleted, len(keys))
			}
			// The flood's 100 MiB passed through the supervisor's pipes and log: its memory
			// must stay far below that.
			t.Logf("supervisor RSS %d kB after start, peak %d kB", base["VmRSS"], peak["VmHWM"])
			if grew := peak["VmHWM"] - base["VmRSS"]; grew > 48*1024 {
				t.Errorf("supervisor peak RSS grew by %d kB during the flood, want under 48 MiB", grew)
			}
			if n := w.logs.count("worker output"); n < 100*256 {
				t.Errorf("%d worker output lines logged, want the flood's %d", n, 100*256)
			}
			td := w.readTrace()
			for _, want := range []string{"worker stopped: it ran longer than --max-job-duration", "worker killed by a signal"} {
				if w.logs.warned(want) != 1 {
					t.Errorf("log has %d %q lines, want 1", w.logs.warned(want), want)
				}
			}
			// The child the fork worker left behind went with its group.
			var children []int
			for _, r := range td.runs["s5-"+tc.name+"-fork"] {
				children = append(children, r.children...)
			}
			if len(children) != 1 {
				t.Fatalf("fork worker recorded children %v, want one", children)
			}
			if testenv.Alive(children[0]) {
				_ = syscall.Kill(children[0], syscall.SIGKILL)
				t.Errorf("the fork worker's child (pid %d) outlived the job: the process group was not stopped", children[0])
			}
			for _, name := range []string{"hang", "oom"} {
				if runs := td.runs["s5-"+tc.name+"-"+name]; len(runs) != 2 {
					t.Errorf("%s ran %d times, want 2 (stopped, then ok)", name, len(runs))
				}
			}
		})
	}
}

// lapsed reports whether the supervisor logged that the lease of the message behind runs
// lapsed: a rerun then follows from SQS's at-least-once delivery, not from the kill.
func lapsed(w *world, runs []*run) bool {
	ev := w.logs.evidence()
	for _, r := range runs {
		if ev.causes[r.id+"|any"] != "" {
			return true
		}
	}
	return false
}
