package scenarios

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// tenPercent makes 10% of every SQS call fail: 4% answered 500, 3% throttled, 3% lost after
// they took effect.
func tenPercent(throttleCode string) []faultproxy.Rule {
	all := []string{faultproxy.AnyOperation}
	return []faultproxy.Rule{
		{Operations: all, Fault: faultproxy.ServerError, Rate: 0.04},
		{Operations: all, Fault: faultproxy.Throttle, Rate: 0.03 / 0.96, ThrottleCode: throttleCode},
		{Operations: all, Fault: faultproxy.DropAfter, Rate: 0.03 / 0.93},
	}
}

// mixedPlans gives n messages a seeded mix of outcomes: mostly success, some failing once,
// releasing once, slow, or rejected.
func mixedPlans(prefix string, n int, seed int64) (keys, bodies []string) {
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		var plan []string
		switch x := r.Float64(); {
		case x < 0.80:
			plan = []string{"ok"}
		case x < 0.88:
			plan = []string{"fail", "ok"}
		case x < 0.92:
			plan = []string{"release", "ok"}
		case x < 0.96:
			plan = []string{"sleep:300"}
		default:
			plan = []string{"reject"}
		}
		keys = append(keys, key)
		bodies = append(bodies, body(key, plan...))
	}
	return keys, bodies
}

// TestScenario1SQSErrors: 10% of every SQS call fails (500, throttle, lost answer) while
// the supervisor works through a mix of outcomes. Nothing is lost, nothing runs twice at
// once, and a success runs again only after a logged delete failure.
func TestScenario1SQSErrors(t *testing.T) {
	n := 200
	if soakDuration(t) > 0 {
		n = 1000
	}
	for _, tc := range []struct {
		seed     int64
		throttle string
	}{{1, faultproxy.ThrottlingException}, {2, faultproxy.RequestThrottled}, {3, faultproxy.ThrottlingException}} {
		t.Run(fmt.Sprintf("seed=%d", tc.seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, testenv.QueueOptions{MaxReceiveCount: 10}, tc.seed, tenPercent(tc.throttle))
			keys, bodies := mixedPlans(fmt.Sprintf("s1-%d", tc.seed), n, tc.seed)
			w.sendBodies(bodies)
			cfg := w.config()
			cfg.Concurrency = 8
			began := time.Now()
			stop := w.start(cfg, tc.seed)
			w.eventually("the queue to empty", time.Duration(n)*time.Second/2, func() bool { return w.depth(w.q.URL) == 0 })
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := w.verify(keys, verifyOpts{})
			t.Logf("%d messages in %v: %v", n, time.Since(began).Round(time.Millisecond), got)
			if got.FaultsInjected == 0 {
				t.Error("no fault was injected: the scenario proved nothing")
			}
			if got.InQueue != 0 {
				t.Errorf("%d messages still in the queue after it emptied", got.InQueue)
			}
		})
	}
}
