package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/tracing"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/worker"
)

// Deps are what Run needs from outside: the SQS client, the logger, the metrics recorder,
// and the channel that says "stop now".
type Deps struct {
	// SQS is the client, usually *sqs.Client.
	SQS sqsAPI
	// Logger receives every log line; nil discards them.
	Logger *slog.Logger
	// Metrics receives measurements; nil is alarms.Discard.
	Metrics alarms.Recorder
	// Abort, when closed, ends a drain at once: workers are killed, their messages released.
	Abort <-chan struct{}
	// Random returns numbers in [0, 1) for jitter; nil uses math/rand/v2.
	Random func() float64
	// Protection, when set, is the ECS agent's task scale-in protection endpoint: the task
	// is protected while watchbot holds messages and for cfg.ProtectionIdle after, and the
	// protection is dropped once a stop's drain has finished.
	Protection ProtectionAPI
	// Dedupe, when set, is the table of duplicate suppression (cfg.Dedupe): each message's
	// key is claimed there before it runs. It goes with cfg.Dedupe.Table; nil is off.
	Dedupe DedupeAPI
	// Tenants, when set, counts each tenant's runs and waits (its MessageGroupId), for
	// /metrics and status (docs/queues.md); nil counts none.
	Tenants *Tenants
	// S3 fetches and deletes the payloads of pointer messages (cfg.Payload). It goes with
	// cfg.Payload.Buckets; nil is off.
	S3 PayloadAPI
	// Tracer, when enabled, records a span per run (docs/tracing.md); nil records none. The
	// worker receives the message's trace context either way.
	Tracer *tracing.Provider

	// Limiter, when set, is the limiter built from cfg.Limits.Fleet, which Run runs until its
	// drain is over (the caller may read its Snapshot meanwhile); nil builds one that holds
	// the limits per task.
	Limiter *limits.Limiter
	// PerQueue gives the queues, by name (one queue or several, Config.Queues), their own
	// client, gauges, recorder and dedupe store. A queue missing from it keeps private gauges
	// and uses SQS, Metrics and Dedupe above.
	PerQueue map[string]QueueDeps

	// spawn stands in for worker processes in tests; nil runs real ones.
	spawn worker.Spawn
}

// QueueDeps are one queue's own client, gauges, recorder and dedupe store.
type QueueDeps struct {
	// SQS is the queue's client, which sends to its endpoint and region; nil uses Deps.SQS.
	SQS sqsAPI
	// Load is kept up to date with the queue's slots and busy slots, for the metrics gauges;
	// Health with whether the queue makes progress and takes work, for health and readiness
	// endpoints. nil keeps private ones.
	Load   *Load
	Health *Health
	// Metrics receives the queue's measurements; nil uses Deps.Metrics.
	Metrics alarms.Recorder
	// Dedupe is the dedupe table's store for the queue; nil uses Deps.Dedupe. With several
	// queues, and Config.Dedupe.Table, every queue needs its own, its keys scoped by the
	// queue's name, as a table shared by several queues keeps them (docs/dedupe.md).
	Dedupe DedupeAPI
}

// queueDeps are the deps of one queue of a listen: Deps with the queue's own client,
// recorder, dedupe store and logger in place, and its gauges.
type queueDeps struct {
	Deps
	load   *Load
	health *Health
}

// check refuses deps that do not go with cfg.
func (d Deps) check(cfg Config) error {
	switch {
	case d.SQS == nil:
		return errors.New("supervisor: no SQS client")
	case (cfg.Dedupe.Table != "") != (d.Dedupe != nil):
		return errors.New("supervisor: Config.Dedupe.Table and Deps.Dedupe go together")
	case cfg.Limits.Fleet.Table != "" && d.Limiter == nil:
		return errors.New("supervisor: Config.Limits.Fleet.Table needs Deps.Limiter, built on the table")
	case cfg.Payload.enabled() != (d.S3 != nil):
		return errors.New("supervisor: Config.Payload.Buckets and Deps.S3 go together")
	}
	return nil
}

// withDefaults returns d with what was left nil filled in: no logs, no metrics,
// math/rand/v2.
func (d Deps) withDefaults() Deps {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Metrics == nil {
		d.Metrics = alarms.Discard
	}
	if d.Random == nil {
		d.Random = rand.Float64
	}
	return d
}

// forQueue returns the deps of cfg's queue, one of the n queues of a listen: its own client,
// gauges, recorder and dedupe store from PerQueue, and, with several, log lines that name it.
func (d Deps) forQueue(cfg Config, n int) (queueDeps, error) {
	name := queueattr.NameFromURL(cfg.QueueURL)
	own := d.PerQueue[name]
	if n > 1 {
		d.Logger = d.Logger.With("queue", name)
		if d.Dedupe != nil && own.Dedupe == nil {
			return queueDeps{}, fmt.Errorf("supervisor: queue %s has no Deps.PerQueue dedupe store: with several queues, each queue's keys are scoped by its name", name)
		}
	}
	if own.SQS != nil {
		d.SQS = own.SQS
	}
	if own.Metrics != nil {
		d.Metrics = own.Metrics
	}
	if d.Dedupe != nil && own.Dedupe != nil {
		d.Dedupe = own.Dedupe
	}
	q := queueDeps{Deps: d, load: own.Load, health: own.Health}
	if q.load == nil {
		q.load = NewLoad()
	}
	if q.health == nil {
		q.health = NewHealth(cfg)
	}
	return q, nil
}
