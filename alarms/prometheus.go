package alarms

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// PrometheusMetric is how one of watchbot's metrics appears in Prometheus exposition.
type PrometheusMetric struct {
	// Metric is the CloudWatch metric it mirrors; "" for the gauges only Prometheus has.
	Metric Metric
	Name   string
	Type   string // counter, histogram or gauge
	Help   string
}

// PrometheusMetrics lists what /metrics exposes besides the Go runtime and process
// collectors: the counters and distributions of Metrics under Prometheus's names (durations
// in seconds), and the gauges of the task's state that a scraper reads at any moment
// (listen serves them from the supervisor's state).
var PrometheusMetrics = []PrometheusMetric{
	{Metric: WorkerErrors, Name: "watchbot_worker_errors_total", Type: "counter", Help: "Worker runs that failed."},
	{Metric: WorkerSpawnErrors, Name: "watchbot_worker_spawn_errors_total", Type: "counter", Help: "Worker commands that could not be started."},
	{Metric: DeadLetter, Name: "watchbot_dead_lettered_total", Type: "counter", Help: "Messages sent, or left for the redrive policy to move, to the dead-letter queue."},
	{Metric: MessagesProcessed, Name: "watchbot_messages_processed_total", Type: "counter", Help: "Messages whose worker succeeded and that were deleted."},
	{Metric: MessageReceives, Name: "watchbot_messages_received_total", Type: "counter", Help: "Messages received from the queue."},
	{Metric: ScaleInProtectionErrors, Name: "watchbot_scale_in_protection_errors_total", Type: "counter", Help: "Failed calls to the ECS agent's task scale-in protection endpoint."},
	{Metric: DuplicatesSkipped, Name: "watchbot_duplicates_skipped_total", Type: "counter", Help: "Messages deleted without running: a run had completed their dedupe key."},
	{Metric: DedupeErrors, Name: "watchbot_dedupe_errors_total", Type: "counter", Help: "Failed calls to the dedupe table."},
	{Metric: Relays, Name: "watchbot_relays_total", Type: "counter", Help: "New deliveries of messages whose jobs run on without their lease (past SQS's in-flight limit, or after losing it), handed to their owners unrun."},
	{Metric: StopReleases, Name: "watchbot_stop_releases_total", Type: "counter", Help: "Messages a stop released unrun, each a receive toward the redrive policy."},
	{Metric: LimitWaitSeconds, Name: "watchbot_limit_wait_seconds_total", Type: "counter", Help: "Seconds held messages waited for a limit or a pause before they started."},
	{Metric: StartsHeldBack, Name: "watchbot_starts_held_back_total", Type: "counter", Help: "Messages a limit or a pause kept from starting when a slot was free."},
	{Metric: LimitReleases, Name: "watchbot_limit_releases_total", Type: "counter", Help: "Messages released with a delay after their limit key stayed full for --limit-wait."},
	{Metric: PayloadFetchErrors, Name: "watchbot_payload_fetch_errors_total", Type: "counter", Help: "S3 payloads that could not be fetched."},
	{Metric: PayloadDeleteErrors, Name: "watchbot_payload_delete_errors_total", Type: "counter", Help: "S3 payloads that could not be deleted after their message succeeded."},
	{Metric: TraceContextMalformed, Name: "watchbot_trace_context_malformed_total", Type: "counter", Help: "Malformed traceparent or AWSTraceHeader carriers, ignored."},
	{Metric: WorkerDuration, Name: "watchbot_worker_duration_seconds", Type: "histogram", Help: "Wall-clock time of each worker run."},
	{Metric: MessageAge, Name: "watchbot_message_age_seconds", Type: "histogram", Help: "Time from a message's send to the start of its worker."},
	{Metric: ReceiveDuration, Name: "watchbot_receive_duration_seconds", Type: "histogram", Help: "Time each receive took, its long poll and the SDK's retries included."},
	{Metric: RetriedReceiveDuration, Name: "watchbot_receive_retried_duration_seconds", Type: "histogram", Help: "Time taken by the receives that the SDK retried or that failed, which the receive loop waits out."},
	{Metric: LeaseExtensionDuration, Name: "watchbot_lease_extension_duration_seconds", Type: "histogram", Help: "Time each extension of a short receive lease took, which the receive loop also waits for."},
	{Metric: WorkerSlots, Name: "watchbot_worker_slots", Type: "gauge", Help: "Worker slots (--concurrency)."},
	{Metric: ConcurrencyLimit, Name: "watchbot_concurrency_limit", Type: "gauge", Help: "Runs allowed at once now: the slots, or the --concurrency watchbot fleet set applied live, less while the brake is on."},
	{Name: "watchbot_running_jobs", Type: "gauge", Help: "Worker runs under way."},
	{Name: "watchbot_oldest_job_age_seconds", Type: "gauge", Help: "Seconds the longest job under way has run (0: none); past SQS's 12 h in-flight limit only with --dedupe-table, which relays its message."},
	{Name: "watchbot_held_messages", Type: "gauge", Help: "Messages held: running, or waiting for a slot, a batch or their group."},
	{Name: "watchbot_braking", Type: "gauge", Help: "1 while the brake is on, else 0."},
	{Metric: LimitPaused, Name: "watchbot_limit_paused_seconds", Type: "gauge", Help: "Seconds left of the pause a worker asked for (0: none)."},
	{Metric: LimitFallback, Name: "watchbot_limit_fallback", Type: "gauge", Help: "1 while the limits table cannot be reached and the task holds to its share, else 0."},
	{Metric: Paused, Name: "watchbot_paused", Type: "gauge", Help: "1 while an operator's pause (watchbot fleet pause) holds the queue, else 0."},
	{Metric: SettingsVersion, Name: "watchbot_settings_version", Type: "gauge", Help: "Version of the fleet's control (watchbot fleet) the task applies."},
	{Name: "watchbot_last_receive_timestamp_seconds", Type: "gauge", Help: "Unix time of the last receive SQS answered (0 before the first)."},
}

// TenantPrometheusMetrics lists the per-tenant series of /metrics (docs/queues.md), labelled
// queue and tenant: listen serves them from its count of the top tenants.
var TenantPrometheusMetrics = []PrometheusMetric{
	{Name: "watchbot_tenant_runs_total", Type: "counter", Help: "Runs started of the tenant's messages (its MessageGroupId); the tenants outside the top 20 are summed as tenant=\"other\"."},
	{Name: "watchbot_tenant_wait_seconds_total", Type: "counter", Help: "Summed wait in the queue (run start − SentTimestamp) of those runs."},
	{Name: "watchbot_tenant_wait_seconds_max", Type: "gauge", Help: "Longest wait in the queue of those runs."},
}

// Prometheus is a Recorder that keeps the counters and histograms of PrometheusMetrics.
type Prometheus struct {
	counters   map[Metric]prometheus.Counter
	histograms map[Metric]prometheus.Histogram
}

var _ Recorder = (*Prometheus)(nil)

// NewPrometheus registers the counters and histograms with reg, each with constLabels.
func NewPrometheus(reg prometheus.Registerer, constLabels prometheus.Labels) (*Prometheus, error) {
	p := &Prometheus{counters: map[Metric]prometheus.Counter{}, histograms: map[Metric]prometheus.Histogram{}}
	for _, m := range PrometheusMetrics {
		var c prometheus.Collector
		switch {
		case m.Metric == "" || m.Type == "gauge":
			continue // served from the supervisor's state by the caller
		case m.Type == "counter":
			counter := prometheus.NewCounter(prometheus.CounterOpts{Name: m.Name, Help: m.Help, ConstLabels: constLabels})
			p.counters[m.Metric], c = counter, counter
		case m.Type == "histogram":
			// 10 ms to about 44 minutes for runs; 100 ms to about 7 hours for ages.
			buckets := prometheus.ExponentialBuckets(0.01, 4, 10)
			if m.Metric == MessageAge {
				buckets = prometheus.ExponentialBuckets(0.1, 4, 10)
			}
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: m.Name, Help: m.Help, ConstLabels: constLabels, Buckets: buckets})
			p.histograms[m.Metric], c = h, h
		default:
			return nil, fmt.Errorf("prometheus metric %s: unknown type %q", m.Name, m.Type)
		}
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Add records v for m: a counter adds it, a histogram observes it (milliseconds become
// seconds; Diagnostics are seconds already). Other metrics are not Prometheus's.
func (p *Prometheus) Add(m Metric, v float64) {
	if c, ok := p.counters[m]; ok {
		if v >= 0 {
			c.Add(v)
		}
		return
	}
	if h, ok := p.histograms[m]; ok {
		if d, _ := Lookup(m); d.Unit == Milliseconds {
			v /= 1000
		}
		h.Observe(v)
	}
}

// Tee returns a Recorder that records to each of rs.
func Tee(rs ...Recorder) Recorder { return tee(rs) }

type tee []Recorder

func (t tee) Add(m Metric, v float64) {
	for _, r := range t {
		r.Add(m, v)
	}
}
