package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/limits"
)

// Queues are the further queues of a listen that serves several, and how the queues share
// the worker slots (docs/queues.md). Weights and reserves are keyed by queue name (the last
// element of its URL).
type Queues struct {
	// More are the queues after Config.QueueURL, in the order given: strict serves them in
	// that order, QueueURL first.
	More []string
	// Policy is how a free slot goes to the queues with work (--queue-policy).
	Policy QueuePolicy
	// Weights are the queues' weights under PolicyWeighted (--queue-weight); 1 when not given.
	Weights map[string]int
	// Reserve are slots kept for a queue, which no other queue uses (--queue-reserve).
	Reserve map[string]int
}

// URLs returns every queue the configuration names, in order: QueueURL, then Queues.More.
func (c Config) URLs() []string { return append([]string{c.QueueURL}, c.Queues.More...) }

// checkQueues checks the queues and how they share the slots. Weights, reserves and the
// policy are accepted with a single queue as well, where they change nothing, so that one
// task definition serves however many queues it is given.
func (c Config) checkQueues() error {
	q := c.Queues
	if q.Policy != PolicyWeighted && q.Policy != PolicyStrict {
		return setting.Refuse(listenspec.SettingQueuePolicy, string(q.Policy), "must be weighted or strict")
	}
	names := map[string]bool{}
	for _, u := range c.URLs() {
		if err := queueattr.ValidateURL(u); err != nil {
			return setting.Refuse(setting.QueueURL, u, err.Error())
		}
		if r, first := queueattr.RegionFromURL(u), queueattr.RegionFromURL(c.QueueURL); r != first {
			return setting.Refuse(setting.QueueURL, u, fmt.Sprintf("is in region %s, the first queue in %s: one listen serves the queues of one region", r, first))
		}
		name := queueattr.NameFromURL(u)
		if names[name] {
			return setting.Refuse(setting.QueueURL, u, fmt.Sprintf("names queue %s a second time: give each queue once (queues are told apart by name)", name))
		}
		names[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(q.Weights)) {
		if !names[name] {
			return setting.Refuse(listenspec.SettingQueueWeight, name, "names no queue given with "+setting.Ref(setting.QueueURL))
		}
		if w := q.Weights[name]; w < 1 || w > maxQueueWeight {
			return setting.Refuse(listenspec.SettingQueueWeight, fmt.Sprintf("%s=%d", name, w), fmt.Sprintf("must be between 1 and %d", maxQueueWeight))
		}
	}
	sum := 0
	for _, name := range slices.Sorted(maps.Keys(q.Reserve)) {
		if !names[name] {
			return setting.Refuse(listenspec.SettingQueueReserve, name, "names no queue given with "+setting.Ref(setting.QueueURL))
		}
		n := q.Reserve[name]
		if n < 1 {
			return setting.Refuse(listenspec.SettingQueueReserve, fmt.Sprintf("%s=%d", name, n), "must keep at least 1 slot")
		}
		sum += n
	}
	if sum > c.Concurrency {
		return setting.Refuse(listenspec.SettingQueueReserve, nil, fmt.Sprintf("keeps %d slots in all, more than %s (%d)", sum, setting.Ref(listenspec.SettingConcurrency), c.Concurrency))
	}
	for _, u := range c.URLs() {
		if name := queueattr.NameFromURL(u); sum == c.Concurrency && q.Reserve[name] == 0 {
			return setting.Refuse(listenspec.SettingQueueReserve, nil, fmt.Sprintf("keeps all %d slots (%s) for other queues: queue %s would never run", sum, setting.Ref(listenspec.SettingConcurrency), name))
		}
	}
	if len(q.More) > 0 && c.Once {
		return setting.Refuse(setting.QueueURL, nil, "is given more than once: --once takes one message from one queue")
	}
	return nil
}

// maxQueueWeight is the largest --queue-weight: beyond it a queue would take every slot of
// even the largest --concurrency before the next queue's turn.
const maxQueueWeight = 1000

// QueueDeps are one queue's own gauges and recorder, when listen serves several queues.
type QueueDeps struct {
	// Load and Health are kept up to date with the queue's loop; nil keeps private ones.
	Load   *Load
	Health *Health
	// Metrics receives the queue's measurements; nil uses Deps.Metrics.
	Metrics alarms.Recorder
	// Dedupe is the dedupe table's store for the queue, its keys scoped by the queue's name,
	// as a table shared by several queues keeps them (docs/dedupe.md); with
	// Config.Dedupe.Table, every queue needs its own.
	Dedupe DedupeAPI
}

// runQueues runs one supervisor per queue on shared slots: each queue long-polls, keeps its
// rules (redrive policy, FIFO or not, dead-letter queue), its brake, lease heartbeat and
// acknowledger; a slotPool shares the slots. Every queue is checked before any receives,
// and the first that fails stops the start. A stop drains every queue in the same two
// bounded phases, side by side.
func runQueues(ctx context.Context, cfg Config, deps Deps) error {
	urls := cfg.URLs()
	weights, reserves := make([]int, len(urls)), make([]int, len(urls))
	for i, u := range urls {
		name := queueattr.NameFromURL(u)
		weights[i] = max(1, cfg.Queues.Weights[name])
		reserves[i] = cfg.Queues.Reserve[name]
	}
	pool := newSlotPool(cfg.Concurrency, cfg.Queues.Policy, weights, reserves)
	// One limiter for every queue: the limits count the task's starts, whichever queue.
	if deps.Limiter == nil {
		lim, err := limits.New(cfg.Limits.Fleet, nil, time.Now, deps.Logger.With("component", "limits"))
		if err != nil {
			return err
		}
		deps.Limiter = lim
	}
	sups := make([]*Supervisor, 0, len(urls))
	defer func() {
		for _, s := range sups {
			s.runner.removeWorkDirs()
		}
	}()
	for i, u := range urls {
		qcfg := cfg
		qcfg.QueueURL, qcfg.Queues = u, Queues{Policy: cfg.Queues.Policy}
		name := queueattr.NameFromURL(u)
		qdeps := deps
		qdeps.Logger = deps.Logger.With("queue", name)
		qd := deps.PerQueue[name]
		qdeps.Load, qdeps.Health = qd.Load, qd.Health
		if qd.Metrics != nil {
			qdeps.Metrics = qd.Metrics
		}
		if cfg.Dedupe.Table != "" {
			if qd.Dedupe == nil {
				return fmt.Errorf("supervisor: queue %s has no Deps.PerQueue dedupe store: with several queues, each queue's keys are scoped by its name", name)
			}
			qdeps.Dedupe = qd.Dedupe
		}
		qdeps.Protection = nil // one protector for the task, below
		s, err := prepare(ctx, qcfg, qdeps)
		if s != nil {
			sups = append(sups, s)
		}
		if err != nil {
			return queueError(name, err)
		}
		s.shared = &sharedSlots{pool: pool, i: i}
		s.limiterShared = true
	}
	changed := make([]chan struct{}, len(sups))
	for i, s := range sups {
		changed[i] = make(chan struct{}, 1)
		s.limitsChanged = changed[i]
	}
	// The task's scale-in protection follows every queue: on while any holds a message.
	protectCtx, stopProtection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProtection()
	var owned sync.WaitGroup
	// The limiter outlives every queue's drain: no run holds a permit once they are over.
	limitsCtx, stopLimits := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLimits()
	owned.Go(func() {
		if err := deps.Limiter.Run(limitsCtx); err != nil {
			deps.Logger.Error("limits stopped", "error", err)
		}
	})
	owned.Go(func() { fanOut(limitsCtx, deps.Limiter.Changed(), changed) })
	if deps.Protection != nil {
		loads := make(loadSet, len(sups))
		for i, s := range sups {
			loads[i] = s.load
		}
		loads.shareChanged()
		cut := newCutoff()
		defer cut.release()
		stopWatching := context.AfterFunc(ctx, func() { cut.set(time.Now().Add(cfg.ShutdownTimeout + cfg.KillGrace + releaseSlack)) })
		defer stopWatching()
		p := newProtector(cfg, deps, loads, func() bool {
			for _, s := range sups {
				if ok, _ := s.health.Check(time.Now()); !ok {
					return false
				}
			}
			return true
		}, cut)
		deps.Logger.Info("ECS task scale-in protection: on while any queue's messages are held", "idle_hold", cfg.ProtectionIdle.String(),
			"expires_in", p.policy.expiry.String())
		owned.Go(func() { p.run(protectCtx) })
	}
	errs := make([]error, len(sups))
	var queues sync.WaitGroup
	for i, s := range sups {
		queues.Go(func() { errs[i] = s.start(ctx, deps.Abort) })
	}
	queues.Wait()
	stopLimits()
	stopProtection() // every drain has finished: nothing is held any more
	owned.Wait()
	return errors.Join(errs...)
}

// fanOut copies every signal of from to each of to (holding one each, never waiting), until
// ctx ends: the limiter's channel wakes one receiver, and every queue's loop must hear it.
func fanOut(ctx context.Context, from <-chan struct{}, to []chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-from:
			for _, c := range to {
				select {
				case c <- struct{}{}:
				default: // a wake-up is already pending
				}
			}
		}
	}
}

// queueError names the queue in a startup check's error.
func queueError(name string, err error) error {
	var e setting.Error
	if errors.As(err, &e) {
		e.Reason = strings.TrimSuffix(fmt.Sprintf("queue %s: %s", name, e.Reason), ": ")
		return e
	}
	return fmt.Errorf("queue %s: %w", name, err)
}
