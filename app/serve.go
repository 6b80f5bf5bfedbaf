package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/supervisor"
)

// statusServer serves listen's /healthz, /readyz and /metrics (--http-addr).
type statusServer struct {
	srv  *http.Server
	addr net.Addr
	wg   sync.WaitGroup
}

// httpStopTimeout bounds the server's shutdown after the drain.
const httpStopTimeout = 2 * time.Second

// queueView is one queue's client, gauges and health, which its metrics and the status server
// read.
type queueView struct {
	url, name string
	sqs       *sqs.Client
	load      *supervisor.Load
	health    *supervisor.Health
}

// startStatusServer binds addr and serves the health and readiness of the queues (healthy
// and ready when every queue is), and their metrics (the gauges of each queue's load and
// health and of the limiter, the figures of tenants, and the Recorders it returns, one per
// queue, in order), until stop.
func startStatusServer(addr string, queues []queueView, tenants *supervisor.Tenants, lim *limits.Limiter, log *slog.Logger) (*statusServer, []alarms.Recorder, error) {
	reg, recs, err := prometheusRegistry(queues, lim)
	if err != nil {
		return nil, nil, err
	}
	reg.MustRegister(tenantCollector{tenants})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, setting.Refuse(listenspec.SettingHTTPAddr, addr, "cannot be bound: "+err.Error())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ok, reason := everyQueue(queues, func(h *supervisor.Health) (bool, string) { return h.Check(time.Now()) })
		writeStatus(w, ok, "ok", "unhealthy", reason, "")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, reason := everyQueue(queues, (*supervisor.Health).Ready)
		writeStatus(w, ok, "ready", "not ready", reason, tableNote(lim.Snapshot()))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	s := &statusServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, addr: ln.Addr()}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health and metrics server stopped", "error", err)
		}
	})
	log.Info("serving /healthz, /readyz and /metrics", "http_addr", ln.Addr().String())
	return s, recs, nil
}

// tableNote says, while the limits table cannot be reached, since when and what the task
// keeps of the fleet's control meanwhile; "" while it answers. The task stays ready: it
// works on, held to its share of the limits.
func tableNote(s limits.Snapshot) string {
	if !s.Fallback {
		return ""
	}
	return fmt.Sprintf("unreachable since %s: holding to its share of the limits, and to the fleet's control version %d as last read",
		s.FallbackSince.UTC().Format(time.RFC3339), s.ControlVersion)
}

// everyQueue reports whether check holds for every queue's health, and the reason of the
// first that fails, naming its queue when there are several.
func everyQueue(queues []queueView, check func(*supervisor.Health) (bool, string)) (bool, string) {
	for _, q := range queues {
		if ok, reason := check(q.health); !ok {
			if len(queues) > 1 {
				reason = "queue " + q.name + ": " + reason
			}
			return false, reason
		}
	}
	return true, ""
}

// stop shuts the server down, letting requests under way finish for a moment.
func (s *statusServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), httpStopTimeout)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	s.wg.Wait()
}

// writeStatus answers 200 or 503 with a one-line JSON body, with limitsTable when a note
// on the limits table is given.
func writeStatus(w http.ResponseWriter, ok bool, good, bad, reason, limitsTable string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	body := map[string]string{"status": good}
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		body = map[string]string{"status": bad, "reason": reason}
	}
	if limitsTable != "" {
		body["limitsTable"] = limitsTable
	}
	_ = json.NewEncoder(w).Encode(body)
}

// prometheusRegistry builds the registry /metrics serves: the Go and process collectors,
// watchbot's counters and histograms (returned, one Recorder per queue, to record into), and
// the gauges read from each queue's load and health and from the limiter, which the queues
// share. Every series carries its queue's name.
func prometheusRegistry(queues []queueView, lim *limits.Limiter) (*prometheus.Registry, []alarms.Recorder, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	recs := make([]alarms.Recorder, len(queues))
	for i, q := range queues {
		labels := prometheus.Labels{"queue": q.name}
		rec, err := alarms.NewPrometheus(reg, labels)
		if err != nil {
			return nil, nil, err
		}
		recs[i] = rec
		load, health := q.load, q.health
		gauges := map[string]func() float64{
			"watchbot_worker_slots":           func() float64 { return float64(load.Slots()) },
			"watchbot_concurrency_limit":      func() float64 { return float64(load.Limit()) },
			"watchbot_running_jobs":           func() float64 { return float64(load.Running()) },
			"watchbot_oldest_job_age_seconds": func() float64 { return load.OldestRun(time.Now()).Seconds() },
			"watchbot_held_messages":          func() float64 { return float64(load.Held()) },
			"watchbot_braking":                func() float64 { return boolGauge(load.Braking()) },
			"watchbot_limit_paused_seconds":   func() float64 { return pausedSeconds(lim, time.Now()) },
			"watchbot_limit_fallback":         func() float64 { return boolGauge(lim.Snapshot().Fallback) },
			"watchbot_paused":                 fleetPaused(lim, q.name),
			"watchbot_settings_version":       func() float64 { return float64(lim.Snapshot().ControlVersion) },
			"watchbot_last_receive_timestamp_seconds": func() float64 {
				if t := health.LastReceive(); !t.IsZero() {
					return float64(t.UnixNano()) / 1e9
				}
				return 0
			},
		}
		for _, m := range alarms.PrometheusMetrics {
			if m.Type != "gauge" {
				continue
			}
			f, ok := gauges[m.Name]
			if !ok {
				return nil, nil, fmt.Errorf("prometheus gauge %s has no source", m.Name)
			}
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: m.Name, Help: m.Help, ConstLabels: labels}, f))
		}
	}
	return reg, recs, nil
}

// fleetPaused returns a sampler of whether an operator's pause holds the queue named queue.
func fleetPaused(lim *limits.Limiter, queue string) func() float64 {
	return func() float64 {
		_, paused := lim.FleetPause(queue, time.Now())
		return boolGauge(paused)
	}
}

// pausedSeconds is what is left of the limiter's pause at now, in seconds (0: none).
func pausedSeconds(lim *limits.Limiter, now time.Time) float64 {
	return max(0, lim.PausedUntil().Sub(now).Seconds())
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
