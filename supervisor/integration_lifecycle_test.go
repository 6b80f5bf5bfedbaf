package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func TestVolumesEmptiedAfterEveryJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	vol := t.TempDir()
	if err := os.MkdirAll(filepath.Join(vol, "keep-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Each job lists what the previous one left, then leaves files and a directory behind.
	worker := h.script("vol.sh", `ls -A "`+vol+`" >> "`+h.dir+`/seen"; echo x > "`+vol+`/$MessageId"; mkdir -p "`+vol+`/sub/deeper"`)
	cfg := h.config(worker)
	cfg.Volumes = []string{vol}
	h.start(cfg)
	h.send("one", nil)
	h.eventually("the first job", 20*time.Second, func() bool { return h.empty(h.q.URL) })
	h.send("two", nil)
	h.eventually("the second job", 20*time.Second, func() bool { return h.empty(h.q.URL) && h.metrics.get(alarms.MessagesProcessed) == 2 })
	// The first job saw keep-dir (there before watchbot started); the second saw an empty
	// volume (ls -A prints nothing), although the first had left files behind.
	if seen := h.readFile("seen"); seen != "keep-dir\n" {
		t.Fatalf("jobs saw %q in the volume, want only the first to see keep-dir", seen)
	}
	entries, _ := os.ReadDir(vol)
	if len(entries) != 0 {
		t.Fatalf("volume not emptied after the jobs: %v", entries)
	}
	if _, err := os.Stat(vol); err != nil {
		t.Fatalf("the volume itself was removed: %v", err)
	}
}

func TestOnceProcessesOneMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.script("once.sh", `echo "$Message" >> "`+h.dir+`/ran"`)
	h.send("first", nil)
	h.send("second", nil)
	cfg := h.config(worker)
	cfg.Once = true
	cfg.Concurrency = 4 // --once runs one message whatever the concurrency
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), cfg, Deps{SQS: h.c}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("--once did not return after one message")
	}
	if n := strings.Count(h.readFile("ran"), "\n"); n != 1 {
		t.Fatalf("ran %d messages, want 1", n)
	}
	h.eventually("the other message to stay in the queue", 5*time.Second, func() bool { return testenv.Depth(t, h.c, h.q.URL).Visible == 1 })
}

// TestReadAheadAtStop: with one slot and short jobs, receives bring a read-ahead beyond the
// free slot. A stop runs it in the drain when it fits the shutdown window, so no message is
// received and given back (each would go one receive nearer the redrive policy); with a window
// too short for it, the stop hands it back at once, visible again, not left to its lease.
// Either way every message is done or back in the queue.
func TestReadAheadAtStop(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		window  time.Duration
		runsAll bool // the read-ahead runs in the drain
	}{
		{"runs in the drain", 10 * time.Second, true},
		{"handed back when the window is too short", 300 * time.Millisecond, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
			// The body is recorded as the job ends: a job stopped in its sleep is handed back, not done.
			worker := h.script("job.sh", `body=$(cat); sleep 0.2; printf '%s\n' "$body" >> "`+h.dir+`/done"`)
			cfg := h.config(worker)
			cfg.Concurrency = 1
			cfg.ShutdownTimeout = tt.window
			stop := h.start(cfg)
			const n = 30
			for i := range n {
				h.send("m"+strconv.Itoa(i), nil)
			}
			// Once a run has ended, the next receive brings a read-ahead: more in flight than
			// the slot and a message settling.
			h.eventually("a read-ahead beyond the one slot", 20*time.Second, func() bool {
				return testenv.Depth(t, h.c, h.q.URL).InFlight > 3
			})
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			done := strings.Fields(h.readFile("done"))
			depth := testenv.Depth(t, h.c, h.q.URL)
			if depth.InFlight != 0 {
				t.Errorf("%d messages still in flight after the stop; logs:\n%s", depth.InFlight, h.logs)
			}
			if int(depth.Visible)+len(done) != n {
				t.Errorf("%d done + %d visible, want %d", len(done), depth.Visible, n)
			}
			// Messages received again after the stop: those given back carry a receive count.
			var given []string
			for _, m := range testenv.Drain(t, h.c, h.q.URL, 5*time.Second) {
				if m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)] != "1" {
					given = append(given, aws.ToString(m.Body))
				}
			}
			switch {
			case tt.runsAll && len(given) > 0:
				t.Errorf("%d messages were given back at the stop (%v): the read-ahead should have run in the drain", len(given), given)
			case !tt.runsAll && len(given) == 0:
				t.Errorf("no message was given back with a %v window: the read-ahead should have been", tt.window)
			}
		})
	}
}

// Once a receive has failed, a receive whose answer is lost after it took effect keeps its
// messages out of reach for quickLease, not --receive-visibility (20 s here): receives take
// the quick lease and extend what they bring before it runs. The first receive gets a 500
// (the SDK retries it), which turns the quick leases on; the answers of the three receives
// after that call are dropped, and the message is sent while the first of them polls.
func TestQuickLeaseAfterAFailedReceive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	proxy, url := faultproxy.Serve(t, h.emu.Endpoint, faultproxy.Config{Rules: []faultproxy.Rule{
		{Operations: []string{"ReceiveMessage"}, Fault: faultproxy.ServerError, Rate: 1, For: 1},
		{Operations: []string{"ReceiveMessage"}, Fault: faultproxy.DropAfter, Rate: 1, After: 2, For: 3},
	}})
	h.c = testenv.ClientFor(url)
	worker := h.script("count.sh", `echo "$ApproximateReceiveCount" >> "`+h.dir+`/ran"`)
	cfg := h.config(worker)
	cfg.WaitTime = 2 * time.Second
	h.level = slog.LevelDebug
	if cfg.receiveVisibility() != 20*time.Second {
		t.Fatalf("receive lease %v, want 20s", cfg.receiveVisibility())
	}
	h.start(cfg)
	h.eventually("the first dropped receive", 10*time.Second, func() bool { return proxy.Stats().Operations["ReceiveMessage"].Requests > 2 })
	h.send("lost, then run", nil)
	// Lost at least once: with a 20 s lease it could not run within 15 s.
	h.eventually("the message to run and go", 15*time.Second, func() bool { return h.empty(h.q.URL) && h.readFile("ran") != "" })
	if got := h.readFile("ran"); got != "2\n" && got != "3\n" && got != "4\n" {
		t.Errorf("runs, by receive count: %q, want one run, after one to three lost answers", got)
	}
	dropped := 0
	for _, in := range proxy.Injections() {
		if in.Operation != "ReceiveMessage" || in.Fault != faultproxy.DropAfter {
			continue
		}
		dropped++
		if !strings.Contains(string(in.Request), `"VisibilityTimeout":3,`) {
			t.Errorf("a receive after the failed one asked %s, want VisibilityTimeout 3", in.Request)
		}
	}
	if dropped != 3 {
		t.Errorf("%d receive answers dropped, want 3", dropped)
	}
	if n := proxy.Stats().Operations["ChangeMessageVisibilityBatch"].Forwarded; n == 0 {
		t.Error("the message's quick lease was not extended before it ran")
	}
	// The debug lines that say where the time went: the receive that brought the message on
	// a short lease, and its extension.
	brought := testenv.Logged(h.logs.String(), "level", "DEBUG", "got", "1", "short_lease", "true", "took_ms", "*")
	extended := testenv.Logged(h.logs.String(), "level", "DEBUG", "extended", "1", "took_ms", "*")
	if !brought || !extended {
		t.Errorf("debug lines: a short-lease receive that brought the message %v, its extension %v; logs:\n%s", brought, extended, h.logs)
	}
}

func TestHeartbeatKeepsLongJobLeased(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5, VisibilityTimeout: 2 * time.Second})
	worker := h.script("slow.sh", `echo "$MessageId" >> "`+h.dir+`/ran"; sleep 5`)
	cfg := h.config(worker)
	cfg.Concurrency = 3 // free slots that would take the message if its lease expired
	cfg.VisibilityTimeout = 2 * time.Second
	cfg.HeartbeatInterval = 500 * time.Millisecond
	h.start(cfg)
	h.send("long job", nil)
	h.eventually("the job to finish", 30*time.Second, func() bool { return h.empty(h.q.URL) && h.readFile("ran") != "" })
	if n := strings.Count(h.readFile("ran"), "\n"); n != 1 {
		t.Fatalf("a 5 s job under a 2 s visibility timeout ran %d times, want once", n)
	}
}

// A receive that leases for 4 s, with a kill grace of 1 s, leaves 1 s to renew in: the
// heartbeat must extend the lease to the whole visibility timeout within it, or free slots
// would take the message again after 4 s.
func TestShortReceiveLeaseKeepsLongJobLeased(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5, VisibilityTimeout: 30 * time.Second})
	worker := h.script("slow.sh", `echo "$MessageId" >> "`+h.dir+`/ran"; sleep 6`)
	cfg := h.config(worker)
	cfg.Concurrency = 3
	cfg.VisibilityTimeout = 30 * time.Second
	cfg.ReceiveVisibility, cfg.KillGrace = 4*time.Second, time.Second
	h.start(cfg)
	h.send("long job", nil)
	h.eventually("the job to finish", 30*time.Second, func() bool { return h.empty(h.q.URL) && h.readFile("ran") != "" })
	if n := strings.Count(h.readFile("ran"), "\n"); n != 1 {
		t.Fatalf("a 6 s job under a 4 s receive lease ran %d times, want once", n)
	}
}

func TestConcurrencyRunsWorkersAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	// Each worker announces itself and waits until four have: only true concurrency passes.
	worker := h.script("barrier.sh", `
touch "`+h.dir+`/started.$MessageId"
i=0
while [ "$(ls "`+h.dir+`" | grep -c '^started\.')" -lt 4 ]; do
  i=$((i+1)); [ $i -gt 200 ] && exit 1
  sleep 0.05
done
exit 0`)
	cfg := h.config(worker)
	cfg.Concurrency = 4
	h.start(cfg)
	for i := range 4 {
		h.send(fmt.Sprintf("m%d", i), nil)
	}
	h.eventually("four concurrent workers to succeed", 30*time.Second, func() bool { return h.empty(h.q.URL) })
	if got := h.metrics.get(alarms.WorkerErrors); got != 0 {
		t.Fatalf("WorkerErrors = %v: the four workers did not run at once", got)
	}
	if got := h.metrics.get(alarms.MessagesProcessed); got != 4 {
		t.Fatalf("MessagesProcessed = %v, want 4", got)
	}
}

func TestShutdownLetsRunningJobFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.script("job.sh", `touch "`+h.dir+`/started"; sleep 1; touch "`+h.dir+`/finished"`)
	stop := h.start(h.config(worker))
	h.send("finish me", nil)
	h.eventually("the job to start", 20*time.Second, func() bool { return h.readFile("started") != "" || fileExists(filepath.Join(h.dir, "started")) })
	if err := stop(); err != nil {
		t.Fatalf("Run after drain: %v", err)
	}
	if !fileExists(filepath.Join(h.dir, "finished")) {
		t.Fatal("the running job was not allowed to finish")
	}
	if !h.empty(h.q.URL) {
		t.Fatal("the finished job's message was not deleted during the drain")
	}
}

func TestShutdownTimeoutReleasesMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.script("stuck.sh", `touch "`+h.dir+`/started"; trap 'echo got TERM; exit 143' TERM; sleep 60 & wait`)
	cfg := h.config(worker)
	cfg.ShutdownTimeout = 500 * time.Millisecond
	stop := h.start(cfg)
	h.send("too slow", nil)
	h.eventually("the job to start", 20*time.Second, func() bool { return fileExists(filepath.Join(h.dir, "started")) })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Released with visibility 0: visible again at once, not after the 30 s lease.
	out, err := h.c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(h.q.URL), WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("message not visible right after shutdown; logs:\n%s", h.logs)
	}
	if got := h.metrics.get(alarms.WorkerErrors); got != 0 {
		t.Errorf("WorkerErrors = %v for a job stopped at shutdown, want 0", got)
	}
}
