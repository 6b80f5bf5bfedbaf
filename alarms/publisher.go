package alarms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// The publisher modes (--metrics).
const (
	ModeCloudWatch = "cloudwatch"
	ModeEMF        = "emf"
	ModeNone       = "none"
)

// CloudWatch's limits on what watchbot publishes.
const (
	maxNamespaceLen      = 255
	maxDimensions        = 30
	maxDimensionNameLen  = 255
	maxDimensionValueLen = 1024
)

// CloudWatchAPI is the part of the CloudWatch client the publisher uses.
type CloudWatchAPI interface {
	PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var _ CloudWatchAPI = (*cloudwatch.Client)(nil)

// Dimension is one CloudWatch dimension every published metric carries.
type Dimension struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// DimensionQueueName is the dimension naming the queue a metric is about: with several
// queues, each queue's metrics carry its own name.
const DimensionQueueName = "QueueName"

// dimensionFlags names the flag behind a dimension, for error messages.
var dimensionFlags = map[string]string{DimensionQueueName: "--queue-url", "Service": "--metrics-service"}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Mode is ModeCloudWatch, ModeEMF or ModeNone (--metrics).
	Mode string
	// Namespace is the CloudWatch namespace (--metrics-namespace).
	Namespace string
	// Dimensions every metric carries, at least one: {QueueName, <queue>} first, then e.g.
	// {Service, <name>} for --metrics-service. When there are several, each metric is also
	// published with the first dimension alone, which is the set the alarms of Definitions
	// watch; so every task's values reach the alarms whatever other dimensions it adds.
	Dimensions []Dimension
	// Interval is the flush period: one window of aggregated values per Interval.
	Interval time.Duration
	// FlushTimeout bounds one flush, the PutMetricData calls with the SDK's retries included,
	// and the DLQDepth sample; the flush at shutdown uses it too, so --shutdown-timeout plus
	// FlushTimeout must fit within the container's stop timeout.
	FlushTimeout time.Duration
	// MaxBufferedWindows is how many windows CloudWatch may fail to take before the oldest is
	// dropped (counted in Stats.Dropped and logged with the values lost).
	MaxBufferedWindows int
	// Stdout receives the EMF lines, one JSON object per line, each in one Write.
	Stdout io.Writer
	// CloudWatch is the client for ModeCloudWatch, normally a *cloudwatch.Client.
	CloudWatch CloudWatchAPI
	// DLQDepth, when set, is sampled once per Interval into DeadLetterQueueDepth.
	DLQDepth func(ctx context.Context) (int64, error)
	// Samplers are sampled once per Interval, just before each periodic flush (not the final
	// one, so a stopping task does not report a last, partial window of its slots).
	Samplers []Sampler
	// Logger receives warnings about failed flushes, refused values and dropped data. Nil
	// discards them.
	Logger *slog.Logger
	// Now is the clock stamped on published values. Nil means time.Now.
	Now func() time.Time
}

// DefaultPublisherConfig returns the defaults: EMF, namespace Watchbot, a 60 s interval, 5 s
// flushes (the margin the generated stack leaves after --shutdown-timeout and --kill-grace)
// and 15 buffered windows. Dimensions, Stdout, CloudWatch and DLQDepth are the caller's.
func DefaultPublisherConfig() PublisherConfig {
	return PublisherConfig{
		Mode:               ModeEMF,
		Namespace:          "Watchbot",
		Interval:           60 * time.Second,
		FlushTimeout:       5 * time.Second,
		MaxBufferedWindows: 15,
		Now:                time.Now,
	}
}

// Validate reports the first setting CloudWatch or the publisher would refuse. It checks what
// a user chose, not the wiring (Stdout, CloudWatch), which NewPublisher checks: a command
// validates its flags before it builds the clients.
func (c PublisherConfig) Validate() error {
	switch c.Mode {
	case ModeCloudWatch, ModeEMF, ModeNone:
	default:
		return setting.Refuse(listenspec.SettingMetrics, c.Mode, fmt.Sprintf("must be %s, %s or %s", ModeCloudWatch, ModeEMF, ModeNone))
	}
	if err := ValidateNamespace(c.Namespace); err != nil {
		return err
	}
	if err := validateDimensions(c.Dimensions); err != nil {
		return err
	}
	if c.Interval < time.Second || c.Interval > time.Hour {
		return fmt.Errorf("metrics interval (%s) must be between 1s and 1h", c.Interval)
	}
	if c.FlushTimeout <= 0 {
		return fmt.Errorf("metrics flush timeout (%s) must be positive", c.FlushTimeout)
	}
	if c.MaxBufferedWindows < 1 {
		return fmt.Errorf("metrics buffered windows (%d) must be at least 1", c.MaxBufferedWindows)
	}
	return nil
}

// Sampler is a level (a Gauge metric) a publisher samples once per interval.
type Sampler struct {
	Metric Metric
	Sample func() float64
}

// ValidateNamespace reports why CloudWatch would refuse ns as a custom metrics namespace, as
// a setting.Error naming the setting.
func ValidateNamespace(ns string) error {
	refuse := func(v any, reason string) error {
		return setting.Refuse(listenspec.SettingMetricsNamespace, v, reason)
	}
	switch {
	case strings.TrimSpace(ns) == "":
		return refuse(nil, "must not be empty")
	case len(ns) > maxNamespaceLen:
		return refuse(characters(len(ns)), fmt.Sprintf("must be at most %d characters", maxNamespaceLen))
	case strings.HasPrefix(ns, "AWS/"):
		return refuse(ns, "must not start with AWS/, which AWS services reserve")
	case strings.HasPrefix(ns, ":"):
		return refuse(ns, "must not start with a colon")
	}
	for _, r := range ns {
		if !namespaceRune(r) {
			return refuse(ns, "may hold only letters, digits, spaces and . - _ / # :")
		}
	}
	return nil
}

func namespaceRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" .-_/#:", r)
}

func validateDimensions(dims []Dimension) error {
	if len(dims) == 0 {
		return errors.New("metrics need at least one dimension (QueueName)")
	}
	if len(dims) > maxDimensions {
		return fmt.Errorf("metrics carry %d dimensions; CloudWatch allows %d", len(dims), maxDimensions)
	}
	seen := make(map[string]bool, len(dims))
	for _, d := range dims {
		name := fmt.Sprintf("metrics dimension %q", d.Name)
		if flag := dimensionFlags[d.Name]; flag != "" {
			name += " (" + flag + ")"
		}
		switch {
		case strings.TrimSpace(d.Name) == "" || len(d.Name) > maxDimensionNameLen:
			return fmt.Errorf("%s: name must have 1 to %d characters", name, maxDimensionNameLen)
		case !printableASCII(d.Name) || strings.HasPrefix(d.Name, ":"):
			return fmt.Errorf("%s: name must be printable ASCII and not start with a colon", name)
		case d.Name == "_aws":
			return fmt.Errorf("%s: name is reserved by the embedded metric format", name)
		case seen[d.Name]:
			return fmt.Errorf("%s: given twice", name)
		case strings.TrimSpace(d.Value) == "" || len(d.Value) > maxDimensionValueLen:
			return fmt.Errorf("%s: value (%q) must have 1 to %d characters, not only spaces", name, d.Value, maxDimensionValueLen)
		case !printableUTF8(d.Value):
			return fmt.Errorf("%s: value (%q) must be printable UTF-8", name, d.Value)
		}
		if _, ok := Lookup(Metric(d.Name)); ok {
			return fmt.Errorf("%s: name is a metric's name", name)
		}
		seen[d.Name] = true
	}
	return nil
}

func printableUTF8(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Stats counts what a Publisher did, for logs and tests.
type Stats struct {
	// Published counts datums CloudWatch accepted, or metric values written as EMF.
	Published int64
	// Dropped counts datums given up on: the buffer of failed windows overflowed, CloudWatch
	// rejected them as invalid, the final flush failed, or the EMF line could not be written.
	// Every drop is also logged with the metrics and sums lost.
	Dropped int64
	// Refused counts values Add refused: NaN, ±Inf, beyond ±2^360, or an unknown metric.
	Refused int64
	// Failures counts PutMetricData calls (after the SDK's retries) and EMF writes that failed.
	Failures int64
}

// Publisher aggregates the supervisor's measurements in memory and publishes them once per
// Interval: to CloudWatch with PutMetricData, or as embedded-metric-format lines on Stdout.
// Add never waits for the publishing.
type Publisher struct {
	cfg     PublisherConfig
	log     *slog.Logger
	dimSets [][]Dimension // the first is Dimensions, the primary set; the second, if any, the alarms' set

	mu      sync.Mutex
	window  map[Metric]*aggregate
	refused map[Metric]int64

	// flushing holds one token, which the flush under way takes: it serialises the flushes,
	// and its holder alone reads and writes pending. It is a channel, not a lock, because
	// its holder calls CloudWatch: a flush that waits for another gives up when its context
	// ends.
	flushing chan struct{}
	pending  []batch // windows (or what is left of them) CloudWatch has not taken yet

	published, dropped, refusedTotal, failures atomic.Int64
}

var _ Recorder = (*Publisher)(nil)

// NewPublisher returns a Publisher of cfg, which its caller has validated (Validate, run when
// the settings are read), once it has checked that cfg's mode has what it writes to. It does
// no I/O.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Mode == ModeEMF && cfg.Stdout == nil {
		return nil, errors.New("emf metrics need an output for their lines")
	}
	if cfg.Mode == ModeCloudWatch && cfg.CloudWatch == nil {
		return nil, errors.New("cloudwatch metrics need a CloudWatch client")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Dimensions = slices.Clone(cfg.Dimensions)
	dimSets := [][]Dimension{cfg.Dimensions}
	if len(cfg.Dimensions) > 1 {
		dimSets = append(dimSets, cfg.Dimensions[:1])
	}
	return &Publisher{
		cfg:      cfg,
		log:      log.With("metrics", cfg.Mode),
		dimSets:  dimSets,
		window:   make(map[Metric]*aggregate),
		refused:  make(map[Metric]int64),
		flushing: make(chan struct{}, 1),
	}, nil
}

// Add records v for m in the current window. It never blocks on publishing and is safe for
// concurrent use. NaN, ±Inf, values beyond ±2^360 and unknown metrics are refused: counted in
// Stats.Refused and logged at the next flush.
func (p *Publisher) Add(m Metric, v float64) {
	if p.cfg.Mode == ModeNone {
		return
	}
	if slices.Contains(Diagnostics, m) {
		return // Prometheus's alone
	}
	_, known := Lookup(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !known || !validValue(v) {
		p.refused[m]++
		p.refusedTotal.Add(1)
		return
	}
	a := p.window[m]
	if a == nil {
		a = newAggregate()
		p.window[m] = a
	}
	a.add(v)
}

// Stats returns the publisher's counters.
func (p *Publisher) Stats() Stats {
	return Stats{
		Published: p.published.Load(),
		Dropped:   p.dropped.Load(),
		Refused:   p.refusedTotal.Load(),
		Failures:  p.failures.Load(),
	}
}

// Run samples DLQDepth and flushes once per Interval until ctx is done, then flushes once more
// with a context detached from ctx and bounded by FlushTimeout, and returns nil. Whatever that
// last flush cannot publish is counted in Stats.Dropped and logged.
func (p *Publisher) Run(ctx context.Context) error {
	if p.cfg.Mode == ModeNone {
		<-ctx.Done()
		return nil
	}
	ticker := time.NewTicker(p.cfg.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			p.finalFlush(context.WithoutCancel(ctx))
			return nil
		case <-ticker.C:
			p.sampleDLQ(ctx)
			for _, g := range p.cfg.Samplers {
				p.Add(g.Metric, g.Sample())
			}
			fctx, cancel := context.WithTimeout(ctx, p.cfg.FlushTimeout)
			_ = p.Flush(fctx)
			cancel()
		}
	}
}

// sampleDLQ records the dead-letter queue's depth, when DLQDepth is set.
func (p *Publisher) sampleDLQ(ctx context.Context) {
	if p.cfg.DLQDepth == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, p.cfg.FlushTimeout)
	defer cancel()
	n, err := p.cfg.DLQDepth(sctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("sample dead-letter queue depth", "metric", string(DeadLetterQueueDepth), "error", err)
		}
		return
	}
	p.Add(DeadLetterQueueDepth, float64(n))
}

// Flush publishes the current window now (and, for CloudWatch, windows that earlier flushes
// failed to send). Run calls it; it is exported for callers that need a flush at a given
// point. It returns the first error; values that could not be sent stay buffered (CloudWatch)
// or are dropped (EMF), as counted in Stats and logged.
func (p *Publisher) Flush(ctx context.Context) error {
	if p.cfg.Mode == ModeNone {
		return nil
	}
	select {
	case p.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.flushing }()
	return p.flush(ctx)
}

// finalFlush flushes once more, bounded by FlushTimeout, and gives up on what CloudWatch did
// not take: it waits for the flush under way, if any, then holds the token throughout.
func (p *Publisher) finalFlush(ctx context.Context) {
	p.flushing <- struct{}{}
	defer func() { <-p.flushing }()
	fctx, cancel := context.WithTimeout(ctx, p.cfg.FlushTimeout)
	_ = p.flush(fctx) // failures are logged and counted by flush
	cancel()
	p.dropPending("the final flush failed")
}

// flush is Flush's work, by the holder of the flushing token.
func (p *Publisher) flush(ctx context.Context) error {
	now := p.cfg.Now()

	p.mu.Lock()
	window, refused := p.window, p.refused
	p.window, p.refused = make(map[Metric]*aggregate), make(map[Metric]int64)
	p.mu.Unlock()

	for _, m := range sortedKeys(refused) {
		p.log.Warn("metric values refused: not finite, beyond ±2^360, or an unknown metric",
			"metric", string(m), "refused", refused[m])
	}
	if p.cfg.Mode == ModeEMF {
		return p.writeEMF(now, window)
	}
	return p.putCloudWatch(ctx, now, window)
}

// sortedKeys returns a map's metrics in a stable order.
func sortedKeys[V any](m map[Metric]V) []Metric {
	return slices.Sorted(maps.Keys(m))
}

// characters is a length shown in place of a value too long to repeat.
type characters int

func (n characters) String() string { return fmt.Sprintf("%d characters", int(n)) }
