package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// A listen on a limits table records its limits there, and status --limits-table shows them
// beside their use.
func TestStatusShowsListenLimits(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0)
	status := func(args ...string) string {
		t.Helper()
		cmd := f.emu.Watchbot(t, append([]string{"status", "--queue-url", f.q.URL, "--limits-table", f.table}, args...)...)
		cmd.Env = append(cmd.Env, f.dynEnv...)
		var stdout, stderr testenv.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, stderr.String); code != 0 {
			t.Fatalf("status exit %d: %s", code, stderr.String())
		}
		return stdout.String()
	}
	if out := status(); !strings.Contains(out, "limits:       not recorded") {
		t.Errorf("status before any listen:\n%s", out)
	}
	f.start(1, nil, "--rate-limit", "20/s", "--fleet-concurrency", "4", "--limit-key", "attr:tenant", "--concurrency-per-key", "1", "--max-pause", "2m")
	var got struct {
		Limits struct {
			Settings *app.LimitSettings `json:"settings"`
		} `json:"limits"`
	}
	testenv.Eventually(t, "status showing the listen's limits", 30*time.Second, func() bool {
		return json.Unmarshal([]byte(status("--json")), &got) == nil && got.Limits.Settings != nil
	})
	s := *got.Limits.Settings
	if s.RateLimit != 20 || s.FleetConcurrency != 4 || s.LimitKey != "attr:tenant" || s.ConcurrencyPerKey != 1 || s.RateLimitPerKey != 0 ||
		s.LimitWait != "30s" || s.MaxPause != "2m0s" || s.Task == "" || s.WrittenAt.IsZero() {
		t.Errorf("status --json limits settings %+v\n%s", s, f.logs())
	}
	want := "limits:       --rate-limit 20/s --fleet-concurrency 4 --limit-key attr:tenant --concurrency-per-key 1 --limit-wait 30s --max-pause 2m0s (recorded by " + s.Task
	if out := status(); !strings.Contains(out, want) {
		t.Errorf("status lacks %q:\n%s", want, out)
	}
}

// A limits table that does not exist stops listen's start with exit 2, naming the flag: a
// mistyped name would otherwise hold every task to its smallest fallback share.
func TestListenRefusesAMissingLimitsTable(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dyn := testenv.DynamoDB(t)
	cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--limits-table", "no-such-table", "--rate-limit", "5/s", "--metrics", "none", "--", "true")
	cmd.Env = append(cmd.Env, dyn.Env()...)
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, stderr.String); code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, stderr.String())
	}
	if out := stderr.String(); !strings.Contains(out, "--limits-table") || !strings.Contains(out, "does not exist") {
		t.Errorf("stderr does not name --limits-table and the missing table:\n%s", out)
	}
}
