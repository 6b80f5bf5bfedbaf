package app

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/supervisor"
)

// With several queues, /metrics carries each queue's series under its own label and
// /readyz answers for every queue, naming the first that is not ready.
func TestStatusServerSeveralQueues(t *testing.T) {
	t.Parallel()
	lim := limits.New(limits.DefaultConfig(), nil, time.Now, slog.New(slog.DiscardHandler))
	queues := []queueView{
		{url: "https://sqs.us-east-1.amazonaws.com/1/urgent", name: "urgent", load: supervisor.NewLoad(), health: supervisor.NewHealth(supervisor.DefaultConfig())},
		{url: "https://sqs.us-east-1.amazonaws.com/1/bulk", name: "bulk", load: supervisor.NewLoad(), health: supervisor.NewHealth(supervisor.DefaultConfig())},
	}
	srv, recs, err := startStatusServer("127.0.0.1:0", queues, supervisor.NewTenants(), lim, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	if len(recs) != 2 {
		t.Fatalf("%d recorders, want one per queue", len(recs))
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{`watchbot_worker_slots{queue="urgent"}`, `watchbot_worker_slots{queue="bulk"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "queue urgent: startup checks under way") {
		t.Errorf("/readyz answered %d %s, want 503 naming the queue", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz answered %d, want 200 while starting", code)
	}
}
