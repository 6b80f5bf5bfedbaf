package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// The built binary, with default settings, against an SQS whose ChangeMessageVisibility
// hangs past the lease while held messages are delivered again: at the moment SQS delivers
// Y again (its renewal, sent 6.5 s after its receive, unanswered for the 15 s call timeout),
// the heartbeat gives up X, which has no worker of its own to stop (a batch's, or one in the
// read-ahead), and hands it to the loop. The loop taking Y over, the heartbeat reporting X
// and Y's answer must not wait on each other: watchbot keeps receiving (the messages sent
// after the outage are done) and stops within --shutdown-timeout + --kill-grace + 2 s.
// fakesqs serves the queue (a lapsed lease delivers the message again, as SQS does);
// faultproxy holds every visibility change in the outage. It waits 90 s in real time, so it
// runs under `make soak`; supervisor's TestHungRenewalAtRedelivery proves the same of both
// modes in fake time, and this adds the built binary and its default settings.
func TestListenHungRenewalsKeepReceiving(t *testing.T) {
	if !testenv.Soak() {
		t.Skip("waits 90 s in real time: make soak runs it; TestHungRenewalAtRedelivery (supervisor) proves it in fake time")
	}
	t.Parallel()
	type sending struct {
		at   time.Duration
		body string
	}
	for _, mode := range []struct {
		name string
		args []string
		// The outage starts at from and ends at 40 s.
		from  time.Duration
		sends []sending
	}{
		{
			// Y and W run in one batch from t=0; X alone from 7.6 s. At 20 s Y's lease lapses
			// and it is delivered again; at 20.6 s X's stop deadline falls due, and Y's
			// renewal has not answered yet (it does at 21.5 s).
			name: "batch", args: []string{"--batch-size", "2", "--concurrency", "2"},
			sends: []sending{{0, "Y long"}, {0, "W long"}, {7600 * time.Millisecond, "X mid"}},
		},
		{
			// One slot: A runs and ends (a read-ahead follows a first run), R runs from 0.2 s
			// (its first renewal, at 6.7 s, before the outage), Y waits in the read-ahead from
			// 4 s (its renewal at 10.5 s hangs, it is given up at 17 s, and delivered again
			// at 24 s while its hand-back waits), X from 11.7 s (given up at 24.7 s).
			// A renewal that SQS takes at the end of the outage, after its job was given up,
			// hides the message for the visibility timeout: 30 s rather than 3 min, for the
			// test's time. The receive lease and the first renewal are the defaults' still.
			name: "single", args: []string{"--concurrency", "1", "--visibility-timeout", "30s"}, from: 7 * time.Second,
			sends: []sending{{0, "A quick"}, {200 * time.Millisecond, "R long"}, {4 * time.Second, "Y mid"}, {11700 * time.Millisecond, "X mid"}},
		},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			fake := fakesqs.New()
			upstream, closeFn, err := fake.Listen()
			if err != nil {
				t.Fatalf("fakesqs: %v", err)
			}
			t.Cleanup(func() { _ = closeFn() })
			direct := &testenv.Emulator{Endpoint: upstream}
			c := direct.Client()
			q := direct.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 10})
			const outageEnds = 40 * time.Second
			dir := t.TempDir()
			worker := filepath.Join(dir, "w.sh")
			// The message file holds the body, or a batch's lines.
			script := "#!/bin/sh\ngrep -q long \"$WATCHBOT_MESSAGE_FILE\" && sleep 45\ngrep -q mid \"$WATCHBOT_MESSAGE_FILE\" && sleep 1\nexit 0\n"
			if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			proxy, endpoint := faultproxy.Serve(t, upstream, faultproxy.Config{})
			p, logs := listenBinary(t, direct, append(append([]string{"--queue-url", q.URL, "--endpoint-url", endpoint}, mode.args...), "--", worker)...)
			testenv.Eventually(t, "watchbot to start", 10*time.Second, func() bool { return listening(logs.String()) }, logs.String)
			// The schedule and the outage count from here.
			if err := proxy.SetRules([]faultproxy.Rule{{Operations: []string{"ChangeMessageVisibility", "ChangeMessageVisibilityBatch"},
				Fault: faultproxy.Stall, Rate: 1, From: mode.from, Until: outageEnds}}); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			for _, m := range mode.sends {
				time.Sleep(time.Until(began.Add(m.at)))
				send(t, c, q.URL, m.body)
			}
			time.Sleep(time.Until(began.Add(outageEnds + 2*time.Second)))
			send(t, c, q.URL, "quick 1", "quick 2")
			testenv.Eventually(t, "every message, those sent after the outage too, to be done", 60*time.Second, func() bool {
				return len(fake.Messages(q.URL)) == 0
			}, logs.String)
			// The job stopped because its renewal went unanswered past its stop deadline.
			if !testenv.Logged(logs.String(), "level", "ERROR", "waited", "*") {
				t.Errorf("no renewal went unanswered past its stop deadline: the test did not reach what it is about\n%s", logs)
			}
			asked := time.Now()
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			// The window, the kill grace and 2 s (defaults), and a second for the process
			// itself on a loaded machine.
			limit := 20*time.Second + 5*time.Second + 2*time.Second
			p.Wait(t, limit+time.Second, logs.String)
			if took := time.Since(asked); took > limit+time.Second {
				t.Errorf("exit %v after SIGTERM, want within %v", took, limit)
			}
		})
	}
}
