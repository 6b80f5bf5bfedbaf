package supervisor

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/dedupe"
)

// The randomized interleaving suite: per seed, the whole supervisor in a testing/synctest
// bubble against fakesqs that delays every call at random, hangs renewals and deletes (in
// outages where every renewal hangs, and now and then), loses answers after the call took
// effect, hangs dead-letter sends and (in dedupe mode) the dedupe table's calls, and so lets
// leases lapse and SQS deliver held messages again; messages arrive at random times and a stop
// comes at a random time; the modes are standard, FIFO, batch and dedupe. For every seed:
//   - no deadlock: inBubble reports a frozen bubble, synctest a deadlock through channels,
//     and a Run that does not return is a failure; each prints every goroutine's stack;
//   - no message runs twice at the same time;
//   - the stop ends within --shutdown-timeout + --kill-grace + 2 s;
//   - every message ends deleted or dead-lettered once a fault-free supervisor has drained
//     the queue after it: nothing was left where no receive finds it (so the first ended each
//     message deleted, retried, dead-lettered or handed back), and a message deleted, not
//     dead-lettered, succeeded in a run.
//
// WATCHBOT_SEEDS=N runs N seeds (scripts/soak sets many); WATCHBOT_SEED=N runs seed N alone.
// The report says how many seeds ran, how long they took, and how many reached a hung
// renewal and a redelivery of a lapsed lease at the same moment.

// interleaveSeeds is how many seeds the normal test run tries.
const interleaveSeeds = 128

var interleaveModes = []string{"standard", "fifo", "batch", "dedupe"}

// interleaveStats are the suite's counts over its seeds.
type interleaveStats struct {
	seeds, together, redeliveries, hangs, hungSends, hungTable, lost atomic.Int64
}

func TestInterleavings(t *testing.T) {
	t.Parallel()
	first, n := uint64(1), uint64(interleaveSeeds)
	if v := os.Getenv("WATCHBOT_SEEDS"); v != "" {
		var err error
		if n, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("WATCHBOT_SEEDS=%q: %v", v, err)
		}
	}
	if v := os.Getenv("WATCHBOT_SEED"); v != "" {
		var err error
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("WATCHBOT_SEED=%q: %v", v, err)
		}
		n = 1
	}
	var stats interleaveStats
	began := time.Now()
	for seed := first; seed < first+n; seed++ {
		mode := interleaveModes[seed%uint64(len(interleaveModes))]
		name := fmt.Sprintf("seed=%d/%s", seed, mode)
		t.Run(name, func(t *testing.T) {
			inBubble(t, "TestInterleavings/"+name+" (rerun with WATCHBOT_SEED="+strconv.FormatUint(seed, 10)+")", 2*time.Minute,
				func(t *testing.T) { interleave(t, seed, mode, &stats) })
		})
	}
	report := fmt.Sprintf("interleavings: %d seeds in %v; %d reached a hung renewal and a redelivery of a lapsed lease together (%d such redeliveries, %d SQS calls hung of which %d dead-letter sends, %d dedupe table calls hung, %d answers lost)",
		stats.seeds.Load(), time.Since(began).Round(time.Millisecond), stats.together.Load(), stats.redeliveries.Load(), stats.hangs.Load(), stats.hungSends.Load(),
		stats.hungTable.Load(), stats.lost.Load())
	t.Log(report)
	if os.Getenv("WATCHBOT_SEEDS") != "" {
		fmt.Println(report)
	}
}

// interleave runs one seed: the supervisor under faults, stopped at a random time, then a
// fault-free one draining the queue.
func interleave(t *testing.T, seed uint64, mode string, stats *interleaveStats) {
	rng := seedRand(seed)
	r, deps := chaosSetup(t, rng, mode)
	events, kinds := chaosEvents(rng)
	outages := chaosOutages(rng, events)
	r.sqs.setPlan(chaosPlan(rng, outages))
	db, _ := deps.Dedupe.(*fakeDedupe)
	if db != nil {
		db.mu.Lock()
		db.hangIf = tablePlan(seedRand(seed^0x5bd1e995), outages)
		db.mu.Unlock()
	}
	stop := r.start(deps)
	cfg := r.cfg
	var late []string // sent after the stop: for the drain
	stopped := false
	for _, e := range events {
		time.Sleep(e.at - time.Since(t0Bubble))
		switch {
		case e.body == "":
			stopped = true
			// A stop waits for the long poll under way, whose answer joins the drain.
			limit := max(cfg.ShutdownTimeout+cfg.KillGrace, cfg.WaitTime+receiveSlack) + 2*time.Second
			took, err := stopWithin(t, stop, limit)
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			if took > limit {
				t.Errorf("stop took %v, want at most %v (--shutdown-timeout %v + --kill-grace %v + 2 s)\n%s",
					took, limit, cfg.ShutdownTimeout, cfg.KillGrace, r.logs)
			}
		case stopped:
			late = append(late, e.body)
		default:
			r.send(e.body)
		}
	}
	if twice := r.ranTwice(); len(twice) > 0 {
		t.Errorf("ran twice at the same time: %v\n%s", twice, r.logs)
	}
	r.sqs.mu.Lock()
	together, redeliveries, hangs, hungSends, lost := r.sqs.together, r.sqs.lapsed, r.sqs.hangs, r.sqs.hungSends, r.sqs.lostAnswers
	r.sqs.setPlanLocked(nil)
	r.sqs.mu.Unlock()
	hungTable := 0
	if db != nil {
		db.mu.Lock()
		hungTable, db.hangIf = db.hung, nil
		db.mu.Unlock()
	}
	t.Logf("%d redeliveries of a lapsed lease, %d of them while a renewal hung; %d SQS calls hung of which %d dead-letter sends, %d table calls hung, %d answers lost",
		redeliveries, together, hangs, hungSends, hungTable, lost)
	stats.seeds.Add(1)
	if together > 0 {
		stats.together.Add(1)
	}
	stats.redeliveries.Add(int64(redeliveries))
	stats.hangs.Add(int64(hangs))
	stats.hungSends.Add(int64(hungSends))
	stats.hungTable.Add(int64(hungTable))
	stats.lost.Add(int64(lost))
	chaosDrain(t, r, deps, late, kinds)
}

// chaosSetup builds a seed's rig: its mode, slots, batch, timeouts and backoff.
func chaosSetup(t *testing.T, rng *rand.Rand, mode string) (*chaosRig, Deps) {
	r := newChaosRig(t, mode == "fifo", 3)
	cfg := &r.cfg
	cfg.Concurrency = 1 + rng.IntN(3)
	if mode == "batch" {
		cfg.BatchSize = 2 + rng.IntN(3)
		cfg.BatchWindow = time.Duration(rng.IntN(3)) * time.Second
	}
	// A hung call ends with its timeout: the default, or a short one, which retries renewals
	// more often. Either way the releases after the drain window end in time.
	if rng.IntN(2) == 0 {
		cfg.AckTimeout = time.Duration(300+rng.IntN(1000)) * time.Millisecond
	}
	cfg.ShutdownTimeout = time.Duration(5+rng.IntN(16)) * time.Second
	cfg.KillGrace = time.Duration(1+rng.IntN(3)) * time.Second
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: 30 * time.Second, Jitter: backoff.None}
	var deps Deps
	if mode == "dedupe" {
		cfg.Dedupe = DedupeConfig{Table: "fake", Key: dedupe.MessageIDKey}
		deps.Dedupe = newFakeDedupe()
	}
	r.took = func(body string) time.Duration {
		ms, _ := strconv.Atoi(strings.Fields(body)[2])
		return time.Duration(ms) * time.Millisecond
	}
	r.exit = func(body string) int {
		return map[string]int{"ok": 0, "fail": 1, "reject": 3, "release": 4}[strings.Fields(body)[1]]
	}
	return r, deps
}

// chaosEvent is a message sent at a time, or the stop ("").
type chaosEvent struct {
	at   time.Duration
	body string
}

// chaosEvents draws a seed's messages ("a3 ok 2500": group, number, what the worker does,
// how long it runs in ms), when each is sent, and when the stop comes, in time order; and
// each body's kind.
func chaosEvents(rng *rand.Rand) ([]chaosEvent, map[string]string) {
	kinds := map[string]string{}
	var events []chaosEvent
	for i := range 6 + rng.IntN(11) {
		kind := "ok"
		switch k := rng.IntN(20); {
		case k < 2:
			kind = "fail"
		case k < 4:
			kind = "reject"
		case k < 5:
			kind = "release"
		}
		body := fmt.Sprintf("%c%d %s %d", 'a'+rune(rng.IntN(3)), i, kind, 200+rng.IntN(60_000))
		kinds[body] = kind
		events = append(events, chaosEvent{at: time.Duration(rng.IntN(40_000)) * time.Millisecond, body: body})
	}
	events = append(events, chaosEvent{at: time.Duration(5_000+rng.IntN(80_000)) * time.Millisecond})
	slices.SortStableFunc(events, func(a, b chaosEvent) int { return int(a.at - b.at) })
	return events, kinds
}

// chaosDrain lets every lease lapse, sends what came after the stop, and runs a fault-free
// supervisor until the queue is empty; then every message must be dead-lettered, or deleted
// after a successful run.
func chaosDrain(t *testing.T, r *chaosRig, deps Deps, late []string, kinds map[string]string) {
	cfg := r.cfg
	time.Sleep(cfg.VisibilityTimeout + time.Minute)
	r.send(late...)
	drain := r.start(deps)
	time.Sleep(time.Second) // past its startup checks
	deadline := time.Now().Add(30 * time.Minute)
	for len(r.srv.Messages(r.queue)) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	if left := r.srv.Messages(r.queue); len(left) > 0 {
		t.Errorf("%d messages still in the queue after a fault-free drain of 30 minutes: %+v\n%s", len(left), left, r.logs)
	}
	if _, err := stopWithin(t, drain, cfg.ShutdownTimeout+cfg.KillGrace+2*time.Second); err != nil {
		t.Errorf("drain's Run: %v", err)
	}
	dead := map[string]bool{}
	for _, m := range r.srv.Messages(r.dlq) {
		dead[m.Body] = true
	}
	for body, kind := range kinds {
		if !dead[body] && (kind != "ok" || !r.ran(body)) {
			t.Errorf("%q deleted without a successful run and not dead-lettered\n%s", body, r.logs)
		}
	}
}

// stopWithin stops a supervisor and returns how long Run took to return; a Run that has not
// returned after limit plus ten minutes (of the bubble's clock) fails the test with every
// goroutine's stack.
func stopWithin(t *testing.T, stop func() (time.Duration, error), limit time.Duration) (time.Duration, error) {
	t.Helper()
	type result struct {
		took time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		took, err := stop()
		done <- result{took, err}
	}()
	select {
	case res := <-done:
		return res.took, res.err
	case <-time.After(limit + 10*time.Minute):
		t.Fatalf("Run did not return within %v of the stop request; goroutines:\n%s", limit+10*time.Minute, allStacks())
		return 0, nil
	}
}

// chaosOutage is a time window, from the bubble's start, in which faults come thick.
type chaosOutage struct{ from, to time.Duration }

// chaosOutages draws one or two outages in the first minute, and, one time in two, one from
// the stop on, so that what the drain sends at its end hangs.
func chaosOutages(rng *rand.Rand, events []chaosEvent) []chaosOutage {
	var outages []chaosOutage
	for range 1 + rng.IntN(2) {
		from := time.Duration(rng.IntN(60)) * time.Second
		outages = append(outages, chaosOutage{from, from + time.Duration(15+rng.IntN(25))*time.Second})
	}
	if rng.IntN(2) == 0 {
		for _, e := range events {
			if e.body == "" {
				outages = append(outages, chaosOutage{e.at, e.at + time.Hour})
			}
		}
	}
	return outages
}

// during reports whether now falls in an outage.
func during(outages []chaosOutage, now time.Duration) bool {
	for _, w := range outages {
		if now >= w.from && now < w.to {
			return true
		}
	}
	return false
}

// chaosPlan returns a plan of faults drawn from rng: during an outage every renewal hangs
// and half the deletes and dead-letter sends do; outside them, a delay on about a third of the
// calls, a few hung renewals, deletes and dead-letter sends, and a few answers lost after the
// call took effect.
func chaosPlan(rng *rand.Rand, outages []chaosOutage) func(op string, bodies []string) fault {
	return func(op string, _ []string) fault {
		var f fault
		if rng.Float64() < 0.3 {
			f.delay = time.Duration(rng.IntN(300)) * time.Millisecond
		}
		renewal, del, send := strings.HasPrefix(op, "ChangeMessageVisibility"), strings.HasPrefix(op, "DeleteMessage"), op == "SendMessage"
		if during(outages, time.Since(t0Bubble)) && (renewal || (del || send) && rng.IntN(2) == 0) {
			f.hang = true
		}
		switch p := rng.Float64(); {
		case (renewal && p < 0.05) || (del && p < 0.03) || (send && p < 0.1):
			f.hang = true
		case op == "ReceiveMessage" && p < 0.02, op != "ReceiveMessage" && p < 0.05:
			f.lost = true
		}
		return f
	}
}

// tablePlan returns which of the dedupe table's calls hang, drawn from rng: half of them
// during the outages, and a few outside.
func tablePlan(rng *rand.Rand, outages []chaosOutage) func(op string) bool {
	return func(string) bool {
		if during(outages, time.Since(t0Bubble)) {
			return rng.IntN(2) == 0
		}
		return rng.Float64() < 0.05
	}
}
