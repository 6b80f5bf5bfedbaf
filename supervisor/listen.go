package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/limits"
)

// Run checks the queues and the command, then receives and supervises until ctx is done, and
// drains: running workers may finish within cfg.ShutdownTimeout, then they are stopped and
// their messages released. cfg comes validated (Config.Validate, which listen calls when it
// reads its flags); Run trusts it. It returns nil after a clean drain, a setting.Error when a
// startup check fails (before any message is received), and ErrAborted when deps.Abort closed.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if err := PlatformError("listen", runtime.GOOS); err != nil {
		return err
	}
	if err := deps.check(cfg); err != nil {
		return err
	}
	l, err := newListen(ctx, cfg, deps.withDefaults())
	defer l.close()
	if err != nil {
		return err
	}
	return l.run(ctx, deps.Abort)
}

// listen is the queues one listen serves, one supervisor each, and what they share, built
// once whether it serves one queue or several: the limiter (the limits count the task's
// starts, whichever queue), the slots (a pool of a seat per queue), the task's scale-in
// protector, and the stop's cutoff. Each queue long-polls and keeps its own rules (redrive
// policy, FIFO or not, dead-letter queue), brake, lease heartbeat and acknowledger.
type listen struct {
	queues  []*Supervisor
	limiter *limits.Limiter
	// wakes are the queues' copies of the limiter's Changed, which wakes one receiver only.
	wakes []chan struct{}
	// protector, nil without Deps.Protection, follows loads.
	protector *protector
	loads     loadSet
	cut       *cutoff
	log       *slog.Logger
	// workers run every queue's jobs: one worker kind for the listen.
	workers workers
}

// newListen builds the listen of cfg and runs every queue's startup checks, in order; the
// first that fails stops the start; the worker kind starts last. The listen it returns, with
// an error or not, has workers to close.
func newListen(ctx context.Context, cfg Config, deps Deps) (*listen, error) {
	l := &listen{limiter: deps.Limiter, cut: newCutoff(), log: deps.Logger}
	if l.limiter == nil {
		l.limiter = limits.New(cfg.Limits.Fleet, nil, time.Now, deps.Logger.With("component", "limits"))
	}
	w, err := openWorkers(cfg, deps.spawn, deps.Logger)
	if err != nil {
		return l, err
	}
	l.workers = w
	urls := cfg.URLs()
	pool := newQueuePool(cfg)
	for i, u := range urls {
		qcfg := queueConfig(cfg, u)
		qdeps, err := deps.forQueue(qcfg, len(urls))
		if err != nil {
			return l, err
		}
		wake := make(chan struct{}, 1)
		s, err := newSupervisor(ctx, qcfg, qdeps, shares{limiter: l.limiter, limitsChanged: wake, slots: pool.seat(i), cut: l.cut, workers: w})
		if err != nil && len(urls) > 1 {
			return l, queueError(queueattr.NameFromURL(u), err)
		}
		if err != nil {
			return l, err
		}
		l.queues, l.wakes = append(l.queues, s), append(l.wakes, wake)
	}
	// Last: an application may come up while the queues were checked.
	if err := w.kind.Start(ctx); err != nil {
		return l, err
	}
	if deps.Protection != nil {
		loads := make([]*Load, len(l.queues))
		for i, s := range l.queues {
			loads[i] = s.load
		}
		l.loads = newLoadSet(loads)
		l.protector = newProtector(cfg, deps, l.loads, l.healthy, l.cut)
	}
	return l, nil
}

// shares are what a listen's queues share, handed to each queue's supervisor.
type shares struct {
	limiter *limits.Limiter
	// limitsChanged receives when a start the limiter refused may now succeed: the queue's
	// copy of the limiter's Changed.
	limitsChanged <-chan struct{}
	// slots is the queue's seat in the slots the queues share (alone, all of them).
	slots *slotSeat
	// cut is the stop's last moment, which every call to SQS, DynamoDB and the ECS agent obeys.
	cut *cutoff
	// workers run every queue's jobs.
	workers workers
}

// queueConfig is cfg for url, one of its queues: how the queues share the slots is the
// listen's, not the queue's.
func queueConfig(cfg Config, url string) Config {
	cfg.QueueURL, cfg.Queues = url, Queues{Policy: cfg.Queues.Policy}
	return cfg
}

// run serves every queue until ctx is done and each has drained, side by side in the same two
// bounded phases; the limiter and the protector outlive every drain, since until then a run
// may hold a permit or a message.
func (l *listen) run(ctx context.Context, abort <-chan struct{}) error {
	shared, stopShared := context.WithCancel(context.WithoutCancel(ctx))
	defer stopShared()
	var owned sync.WaitGroup
	owned.Go(func() {
		if err := l.limiter.Run(shared); err != nil {
			l.log.Error("limits stopped", "error", err)
		}
	})
	owned.Go(func() { fanOut(shared, l.limiter.Changed(), l.wakes) })
	if p := l.protector; p != nil {
		l.log.Info("ECS task scale-in protection: on while messages are held", "idle_hold", p.policy.idle.String(),
			"expires_in", p.policy.expiry.String())
		l.loads.relay(shared, &owned)
		owned.Go(func() { p.run(shared) })
	}
	errs := make([]error, len(l.queues))
	var queues sync.WaitGroup
	for i, s := range l.queues {
		queues.Go(func() { errs[i] = s.start(ctx, abort) })
	}
	queues.Wait()
	stopShared() // every drain has finished: nothing is held, no run holds a permit
	owned.Wait()
	l.cut.release()
	return errors.Join(errs...)
}

// healthy reports whether every queue makes progress.
func (l *listen) healthy() bool {
	for _, s := range l.queues {
		if ok, _ := s.health.Check(time.Now()); !ok {
			return false
		}
	}
	return true
}

// close stops the worker kind and removes the runs' directories.
func (l *listen) close() {
	l.workers.close()
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
