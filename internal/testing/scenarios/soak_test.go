//go:build linux

package scenarios

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// onePercent makes 1% of every SQS call fail: 0.4% 500s, 0.3% throttles, 0.3% lost answers.
func onePercent() []faultproxy.Rule {
	all := []string{faultproxy.AnyOperation}
	return []faultproxy.Rule{
		{Operations: all, Fault: faultproxy.ServerError, Rate: 0.004},
		{Operations: all, Fault: faultproxy.Throttle, Rate: 0.003},
		{Operations: all, Fault: faultproxy.DropAfter, Rate: 0.003},
	}
}

// soakPlan picks a message's outcome: success, fail then succeed, reject, release then
// succeed, or a slow success.
func soakPlan(r *rand.Rand) []string {
	switch x := r.Float64(); {
	case x < 0.70:
		return []string{"ok"}
	case x < 0.80:
		return []string{"fail", "ok"}
	case x < 0.85:
		return []string{"reject"}
	case x < 0.95:
		return []string{"release", "ok"}
	default:
		return []string{"sleep:2000"}
	}
}

// sample is one minute's reading of a lane.
type sample struct {
	at                         time.Duration
	rssKB, fds, threads, gorts int
	heapKB                     int
}

// flat reports whether the last value stayed within 1.5× the value after warm-up plus
// slack: the definition of "flat" the soak asserts.
func flat(warm, last, slack int) bool { return float64(last) <= 1.5*float64(warm)+float64(slack) }

// TestSoak runs for WATCHBOT_SOAK (e.g. 20m): messages arrive at a steady rate with a mix of
// outcomes and 1% of SQS calls fail, in two lanes at once. The binary lane runs the watchbot
// binary and samples its RSS, open file descriptors and OS threads from /proc each minute;
// the in-process lane runs supervisor.Run in the test process and samples its goroutines
// (every goroutine of the test process: the supervisor's, the SDK's and the fault proxy's)
// and live heap. At the end both lanes must have lost nothing, run nothing twice at once,
// and stayed flat: the last minute's value at most 1.5× the value after the first minute's
// warm-up, plus a small constant (16 MiB of RSS or heap, 50 goroutines, 20 fds, 10 threads).
func TestSoak(t *testing.T) {
	d := soakDuration(t)
	if d == 0 {
		t.Skip("the soak runs when WATCHBOT_SOAK is set to its duration, e.g. WATCHBOT_SOAK=20m (scripts/soak)")
	}
	const rate = 3 // messages per second per lane
	type lane struct {
		name    string
		w       *world
		keys    []string
		samples []sample
		sent    int
	}
	bin := &lane{name: "binary", w: newWorld(t, testenv.QueueOptions{MaxReceiveCount: 5}, 11, onePercent())}
	inp := &lane{name: "in-process", w: newWorld(t, testenv.QueueOptions{MaxReceiveCount: 5}, 12, onePercent())}
	lanes := []*lane{bin, inp}

	p := bin.w.binary("--concurrency", "8", "--visibility-timeout", "10s", "--backoff-base", "1s", "--backoff-max", "4s",
		"--backoff-jitter", "equal", "--shutdown-timeout", "10s", "--kill-grace", "1s")
	cfg := inp.w.config()
	cfg.Concurrency = 8
	cfg.VisibilityTimeout = 10 * time.Second
	stopInProcess := inp.w.start(cfg, 12)

	pid := p.Cmd.Process.Pid
	self := os.Getpid()
	take := func(at time.Duration) {
		st, err := procStatus(pid)
		if err != nil {
			t.Fatalf("watchbot died during the soak: %v; log tail:\n%s", err, bin.w.logs.tail())
		}
		fds, _ := openFDs(pid)
		bin.samples = append(bin.samples, sample{at: at, rssKB: st["VmRSS"], fds: fds, threads: st["Threads"]})
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		sst, _ := procStatus(self)
		sfds, _ := openFDs(self)
		inp.samples = append(inp.samples, sample{at: at, gorts: runtime.NumGoroutine(), heapKB: int(ms.HeapInuse / 1024),
			rssKB: sst["VmRSS"], fds: sfds, threads: sst["Threads"]})
	}

	r := rand.New(rand.NewPCG(7, 7))
	began := time.Now()
	tick := time.NewTicker(time.Second)
	minute := time.NewTicker(time.Minute)
	take(0)
	for time.Since(began) < d {
		select {
		case <-tick.C:
			for _, l := range lanes {
				var bodies []string
				for range rate {
					k := fmt.Sprintf("soak-%s-%d", l.name, l.sent)
					l.sent++
					l.keys = append(l.keys, k)
					bodies = append(bodies, body(k, soakPlan(r)...))
				}
				l.w.sendBodies(bodies)
			}
		case <-minute.C:
			take(time.Since(began).Round(time.Second))
			s := bin.samples[len(bin.samples)-1]
			g := inp.samples[len(inp.samples)-1]
			fmt.Printf("soak %v: binary RSS %d kB, fds %d, threads %d; in-process goroutines %d, heap %d kB; sent %d\n",
				s.at, s.rssKB, s.fds, s.threads, g.gorts, g.heapKB, bin.sent+inp.sent)
		}
	}
	tick.Stop()
	minute.Stop()
	take(time.Since(began).Round(time.Second))

	for _, l := range lanes {
		l.w.eventually(l.name+" lane's queue to empty", 3*time.Minute, func() bool { return l.w.depth(l.w.q.URL) == 0 })
	}
	peak, _ := procStatus(pid)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, time.Minute, bin.w.logs.tail); code != 0 {
		t.Errorf("watchbot exited %d after SIGTERM, want 0", code)
	}
	if err := stopInProcess(); err != nil {
		t.Errorf("in-process Run: %v", err)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\nwatchbot soak: %v at %d messages/s per lane, 1%% of SQS calls faulted\n\n", d, rate)
	fmt.Fprintf(&b, "| lane | faults injected | messages sent | deleted | dead-lettered | lost | concurrent duplicates | reruns after success (explained) | peak RSS | goroutines (warm → last) | fds (warm → last) | threads (warm → last) |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, l := range lanes {
		tl := l.w.verify(l.keys, verifyOpts{drainWait: 30 * time.Second})
		warm, last := l.samples[min(1, len(l.samples)-1)], l.samples[len(l.samples)-1]
		peakRSS := 0
		for _, s := range l.samples {
			peakRSS = max(peakRSS, s.rssKB)
		}
		gor := "n/a (not observable in the binary)"
		if l == inp {
			gor = fmt.Sprintf("%d → %d", warm.gorts, last.gorts)
			if !flat(warm.gorts, last.gorts, 50) {
				t.Errorf("%s: goroutines grew from %d after warm-up to %d", l.name, warm.gorts, last.gorts)
			}
			if !flat(warm.heapKB, last.heapKB, 16<<10) {
				t.Errorf("%s: live heap grew from %d kB after warm-up to %d kB", l.name, warm.heapKB, last.heapKB)
			}
		} else {
			peakRSS = max(peakRSS, peak["VmHWM"])
			if !flat(warm.rssKB, last.rssKB, 16<<10) {
				t.Errorf("%s: RSS grew from %d kB after warm-up to %d kB", l.name, warm.rssKB, last.rssKB)
			}
			if !flat(warm.fds, last.fds, 20) {
				t.Errorf("%s: open fds grew from %d after warm-up to %d", l.name, warm.fds, last.fds)
			}
			if !flat(warm.threads, last.threads, 10) {
				t.Errorf("%s: threads grew from %d after warm-up to %d", l.name, warm.threads, last.threads)
			}
		}
		rssNote := ""
		if l == inp {
			rssNote = " (whole test process)"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d (%d) | %.1f MiB%s | %s | %d → %d | %d → %d |\n",
			l.name, tl.FaultsInjected, tl.Sent, tl.Deleted, tl.DeadLettered, tl.Lost, tl.ConcurrentDuplicates,
			tl.RerunsAfterSuccess, tl.RerunsAfterSuccess-tl.UnexplainedReruns, float64(peakRSS)/1024, rssNote, gor,
			warm.fds, last.fds, warm.threads, last.threads)
		if tl.Lost != 0 || tl.ConcurrentDuplicates != 0 {
			t.Errorf("%s lane: %d lost, %d concurrent duplicates, want 0 and 0", l.name, tl.Lost, tl.ConcurrentDuplicates)
		}
	}
	b.WriteString("\nPer minute (binary RSS kB / fds / threads; in-process goroutines / heap kB):\n")
	for i := range bin.samples {
		s, g := bin.samples[i], inp.samples[i]
		fmt.Fprintf(&b, "  %8v  %7d %4d %3d   %5d %7d\n", s.at, s.rssKB, s.fds, s.threads, g.gorts, g.heapKB)
	}
	fmt.Println(b.String())
}
