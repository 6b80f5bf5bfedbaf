package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// fakeSQS is fakesqs over HTTP, for the test's life. SQS fair queues take MessageGroupId on a standard queue as
// the message's tenant, keep it, and order nothing by it ("Amazon SQS fair queues" and "How
// Amazon SQS fair queues work", SQS Developer Guide); fakesqs does as SQS does. fauxqs 1.9.2
// accepts the id on a standard queue but drops it, so a worker there never sees it.
func fakeSQS(t *testing.T) (*testenv.Emulator, *fakesqs.Server) {
	t.Helper()
	fake := fakesqs.New()
	endpoint, closeFn, err := fake.Listen()
	if err != nil {
		t.Fatalf("fakesqs: %v", err)
	}
	t.Cleanup(func() { _ = closeFn() })
	return &testenv.Emulator{Endpoint: endpoint}, fake
}

// TestListenFairQueue: one tenant's 100 messages on a standard queue run side by side up to
// the slots, never one at a time; the worker sees the tenant as WATCHBOT_GROUP_ID; /metrics
// and `status --metrics-url` count the tenant's runs; a message it rejects keeps its tenant in
// the dead-letter queue, and `dead-letter replay` keeps it on the way back.
func TestListenFairQueue(t *testing.T) {
	t.Parallel()
	emu, fake := fakeSQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bodies := make([]string, 100)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("m%02d", i)
	}
	if _, err := testenv.Send(t.Context(), c, q.URL, bodies, func(int) string { return "tenant-a" }); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	worker := filepath.Join(dir, "worker.sh")
	script := `#!/bin/sh
echo "start $Message $WATCHBOT_GROUP_ID" >> "` + dir + `/trace"
sleep 0.3
echo "end $Message" >> "` + dir + `/trace"
[ "$Message" = m07 ] && exit 3
exit 0
`
	if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	const slots = 8
	addr := freeAddr(t)
	p, logs := listenBinary(t, emu, "--queue-url", q.URL, "--concurrency", "8", "--visibility-timeout", "30s", "--http-addr", addr, "--", worker)
	testenv.Eventually(t, "the queue to drain", 90*time.Second, func() bool {
		return testenv.Depth(t, c, q.URL).Total() == 0 && testenv.Depth(t, c, q.DLQURL).Total() == 1
	}, logs.String)
	code, stdout, stderr := runCLIEnv(t, emu, "status", "--queue-url", q.URL, "--metrics-url", addr, "--json")
	var st struct {
		Tenants []struct {
			Tenant string
			Runs   int64
		}
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("status --metrics-url: exit %d, %v: %s%s", code, err, stdout, stderr)
	}
	if len(st.Tenants) != 1 || st.Tenants[0].Tenant != "tenant-a" || st.Tenants[0].Runs != 100 {
		t.Errorf("status shows tenants %+v, want tenant-a with 100 runs", st.Tenants)
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; logs:\n%s", code, logs)
	}

	data, _ := os.ReadFile(filepath.Join(dir, "trace"))
	runs, busy, most := 0, 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "start":
			runs++
			busy++
			most = max(most, busy)
			if len(f) != 3 || f[2] != "tenant-a" {
				t.Errorf("worker saw %q: want WATCHBOT_GROUP_ID=tenant-a", line)
			}
		case len(f) == 2 && f[0] == "end":
			busy--
		}
	}
	if runs != 100 {
		t.Errorf("%d runs, want 100", runs)
	}
	// Side by side up to the slots: a group on a standard queue orders nothing.
	if most < slots/2 || most > slots {
		t.Errorf("at most %d of one tenant's messages ran at once, want up to the %d slots", most, slots)
	}

	dead := fake.Messages(q.DLQURL)
	if len(dead) != 1 || dead[0].Body != "m07" || dead[0].GroupID != "tenant-a" {
		t.Fatalf("dead-letter queue holds %+v, want m07 of tenant-a", dead)
	}
	code, _, stderr = runCLIEnv(t, emu, "dead-letter", "--queue-url", q.URL, "replay")
	if code != 0 {
		t.Fatalf("replay exit %d: %s", code, stderr)
	}
	back := fake.Messages(q.URL)
	if len(back) != 1 || back[0].Body != "m07" || back[0].GroupID != "tenant-a" || back[0].DedupID != "" {
		t.Errorf("source queue holds %+v after replay, want m07 of tenant-a without a deduplication id", back)
	}
}

// TestSendGroupIDStandardQueue: `send --group-id` names a fair queue's tenant on a standard
// queue; a deduplication id stays FIFO's, and `dead-letter import` keeps the tenant.
func TestSendGroupIDStandardQueue(t *testing.T) {
	t.Parallel()
	emu, fake := fakeSQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	code, stdout, stderr := runCLIEnv(t, emu, "send", "--queue-url", q.URL, "--body", "hello", "--group-id", "tenant-b")
	if code != 0 {
		t.Fatalf("send --group-id on a standard queue: exit %d: %s", code, stderr)
	}
	got := fake.Messages(q.URL)
	if len(got) != 1 || got[0].GroupID != "tenant-b" || got[0].DedupID != "" || got[0].ID != strings.TrimSpace(stdout) {
		t.Fatalf("queue holds %+v, want one message of tenant-b (printed %q)", got, stdout)
	}

	file := filepath.Join(t.TempDir(), "in.jsonl")
	lines := `{"body":"a","groupId":"tenant-c"}` + "\n" + `{"body":"b","attributes":{"MessageGroupId":"tenant-d"}}` + "\n" + `{"body":"c"}` + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLIEnv(t, emu, "dead-letter", "--dlq-url", q.DLQURL, "import", file); code != 0 {
		t.Fatalf("import exit %d: %s", code, stderr)
	}
	groups := map[string]string{}
	for _, m := range fake.Messages(q.DLQURL) {
		groups[m.Body] = m.GroupID
	}
	if want := map[string]string{"a": "tenant-c", "b": "tenant-d", "c": ""}; !maps.Equal(groups, want) {
		t.Errorf("imported groups %v, want %v", groups, want)
	}
}
