package scenarios

import (
	"fmt"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestScenario2EndpointStalls: mid-run the endpoint stops answering (requests and answers
// are held), or refuses every connection, then recovers. The supervisor must not spin (few
// ReceiveMessage requests during the fault), must not crash, and must finish the work.
func TestScenario2EndpointStalls(t *testing.T) {
	tests := []struct {
		name string
		seed int64
		// fault starts the fault for d: a stall, or an outage of dropped connections.
		outage bool
		d      time.Duration
		// job is each message's plan; vis the lease.
		job string
		vis time.Duration
		// maxReceives bounds the ReceiveMessage requests during the fault.
		maxReceives int
	}{
		{name: "stall", seed: 1, d: 4 * time.Second, job: "sleep:100", vis: 6 * time.Second, maxReceives: 5},
		{name: "stall", seed: 2, d: 5 * time.Second, job: "sleep:300", vis: 8 * time.Second, maxReceives: 5},
		{name: "outage", seed: 3, outage: true, d: 5 * time.Second, job: "sleep:100", vis: 6 * time.Second, maxReceives: 25},
		{name: "outage", seed: 4, outage: true, d: 4 * time.Second, job: "sleep:200", vis: 6 * time.Second, maxReceives: 25},
		// The stall outlasts the lease of jobs that are running: their renewals cannot get
		// through, the leases run out, and SQS may hand the messages to a receive while the
		// first runs go on.
		{name: "stall-longer-than-lease", seed: 5, d: 5 * time.Second, job: "sleep:6000", vis: 3 * time.Second, maxReceives: 5},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/seed=%d", tc.name, tc.seed), func(t *testing.T) {
			t.Parallel()
			// No faults until the stall: an empty rule set still counts every request.
			w := newWorld(t, testenv.QueueOptions{MaxReceiveCount: 5}, tc.seed, []faultproxy.Rule{})
			n, concurrency := 40, 4
			if tc.vis < 5*time.Second {
				// Fewer messages than slots: a receive is waiting while the leases run out.
				n, concurrency = 4, 8
			}
			var keys, bodies []string
			for i := range n {
				k := fmt.Sprintf("s2-%s-%d-%d", tc.name, tc.seed, i)
				keys, bodies = append(keys, k), append(bodies, body(k, tc.job))
			}
			w.sendBodies(bodies)
			cfg := w.config()
			cfg.Concurrency = concurrency
			cfg.VisibilityTimeout = tc.vis
			stop := w.start(cfg, tc.seed)

			// Fault once a few jobs are running.
			w.eventually("four jobs running", 30*time.Second, func() bool { return len(w.readTrace().runs) >= 4 })
			before := w.proxy.Stats().Operations["ReceiveMessage"].Requests
			if tc.outage {
				err := w.proxy.SetRules([]faultproxy.Rule{{Operations: []string{faultproxy.AnyOperation}, Fault: faultproxy.DropBefore, Rate: 1, Until: tc.d}})
				if err != nil {
					t.Fatal(err)
				}
			} else if err := w.proxy.Stall(tc.d); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.d)
			during := w.proxy.Stats().Operations["ReceiveMessage"].Requests - before
			t.Logf("%d ReceiveMessage requests during the %v %s", during, tc.d, tc.name)
			if during > tc.maxReceives {
				t.Errorf("%d ReceiveMessage requests during a %v fault, want at most %d: a hot loop", during, tc.d, tc.maxReceives)
			}

			w.eventually("the queue to empty after the fault", 60*time.Second, func() bool { return w.depth(w.q.URL) == 0 })
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := w.verify(keys, verifyOpts{})
			t.Log(got)
			if got.Succeeded != n {
				t.Errorf("%d of %d messages succeeded after the fault, want all", got.Succeeded, n)
			}
		})
	}
}
