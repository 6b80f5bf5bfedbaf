package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestStatusSeveralQueues: one section per queue, in the order given, each with its own
// tenants from a listen's /metrics; --json gives an array; WATCHBOT_QUEUE_URL may list them.
func TestStatusSeveralQueues(t *testing.T) {
	t.Parallel()
	emu, _ := fakeSQS(t)
	urgent := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bulk := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 5})
	if _, err := testenv.Send(t.Context(), emu.Client(), bulk.URL, []string{"a", "b"}, nil); err != nil {
		t.Fatal(err)
	}
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "# TYPE watchbot_tenant_runs_total counter\n"+
			"watchbot_tenant_runs_total{queue=%q,tenant=\"acme\"} 4\n"+
			"watchbot_tenant_runs_total{queue=%q,tenant=\"other\"} 9\n"+
			"watchbot_tenant_runs_total{queue=%q,tenant=\"zeta\"} 12\n"+
			"# TYPE watchbot_tenant_wait_seconds_total counter\n"+
			"watchbot_tenant_wait_seconds_total{queue=%q,tenant=\"acme\"} 6\n"+
			"# TYPE watchbot_tenant_wait_seconds_max gauge\n"+
			"watchbot_tenant_wait_seconds_max{queue=%q,tenant=\"acme\"} 2.5\n",
			bulk.Name, bulk.Name, bulk.Name, bulk.Name, bulk.Name)
	}))
	defer metrics.Close()

	code, stdout, stderr := runCLIEnv(t, emu, "status", "--queue-url", urgent.URL, "--queue-url", bulk.URL, "--metrics-url", metrics.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	sections := strings.Split(stdout, "\n\n")
	if len(sections) != 2 || !strings.Contains(sections[0], "queue:       "+urgent.Name) || !strings.Contains(sections[1], "queue:       "+bulk.Name) {
		t.Fatalf("want a section per queue, in order:\n%s", stdout)
	}
	if !strings.Contains(sections[0], "tenants:     none counted") {
		t.Errorf("the urgent queue's section shows tenants:\n%s", sections[0])
	}
	for _, want := range []string{"visible:     2", "redrive:     to " + bulk.Name + "-dlq after 5 receives",
		"zeta                           12", "acme                            4       1.5s       2.5s", "other                           9"} {
		if !strings.Contains(sections[1], want) {
			t.Errorf("the bulk queue's section lacks %q:\n%s", want, sections[1])
		}
	}
	if strings.Index(sections[1], "other") < strings.Index(sections[1], "acme") {
		t.Errorf("other is not the last tenant row:\n%s", sections[1])
	}

	cmd := emu.Watchbot(t, "status", "--json")
	cmd.Env = append(cmd.Env, "WATCHBOT_QUEUE_URL="+urgent.URL+","+bulk.URL)
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, out.String); code != 0 {
		t.Fatalf("status --json from WATCHBOT_QUEUE_URL: exit %d: %s", code, out.String())
	}
	var all []struct{ Name string }
	if err := json.Unmarshal([]byte(out.String()), &all); err != nil || len(all) != 2 || all[0].Name != urgent.Name || all[1].Name != bulk.Name {
		t.Errorf("--json = %v, %v; want an array of the two queues in order:\n%s", all, err, out.String())
	}

	code, _, stderr = runCLIEnv(t, emu, "status", "--queue-url", urgent.URL, "--queue-url", urgent.URL)
	if code != 2 || !strings.Contains(stderr, "given twice") {
		t.Errorf("a queue given twice: exit %d: %s", code, stderr)
	}
}
