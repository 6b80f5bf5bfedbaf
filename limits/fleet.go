package limits

import (
	"context"
	"time"
)

// FleetPause reports whether an operator's pause holds the queue named queue at now, and
// when it ends (zero: at a resume).
func (l *Limiter) FleetPause(queue string, now time.Time) (until time.Time, paused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fleet.control.PauseOf(queue, now)
}

// BatchSize is the batch size the fleet's control sets for a task in batch mode; 0: the
// task's own --batch-size.
func (l *Limiter) BatchSize() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fleet.batchSize
}

// MaxRunning is the most jobs the fleet's control lets the task run at once: a --concurrency
// set live, held to the task's own; 0 when none is set and the task runs by its own.
func (l *Limiter) MaxRunning() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fleet.maxRunning
}

// Capped reports whether the fleet's --concurrency holds the task at its most running jobs
// now: no start of any key may go ahead until a run ends.
func (l *Limiter) Capped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fleet.maxRunning > 0 && l.running >= l.fleet.maxRunning
}

// Global reports whether a limit over all keys is in force: the task's own --rate-limit or
// --fleet-concurrency, or one the fleet's control set live.
func (l *Limiter) Global() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg.Rate > 0 || l.cfg.Concurrency > 0
}

// applyControl makes c the control in force: the settings it sets replace the task's flags
// (a --concurrency above the task's own is held to it), and its pauses hold. It logs the
// change, who asked and why, and wakes refused starts, which may now succeed. A control of
// the version in force changes nothing.
func (l *Limiter) applyControl(c Control) {
	l.mu.Lock()
	f := &l.fleet
	if c.Version == f.control.Version {
		l.mu.Unlock()
		return
	}
	f.control = c
	f.applied = f.flags.Over(c.Settings)
	f.maxRunning = 0
	if own := l.cfg.Member.Concurrency; f.applied.Concurrency > 0 && own > 0 {
		f.maxRunning = min(f.applied.Concurrency, own)
		// What the task runs by, which its log line and its record say, is the cap it keeps.
		f.applied.Concurrency = f.maxRunning
	}
	f.batchSize = 0
	if l.cfg.Member.BatchSize > 1 {
		f.batchSize = f.applied.BatchSize
	} else {
		// A task of one message a run ignores a batch size, and says so.
		f.applied.BatchSize = l.cfg.Member.BatchSize
	}
	l.setRate(*f.applied.RateLimit)
	l.setConcurrency(*f.applied.FleetConcurrency)
	applied, paused := f.applied, l.cfg.Member.pausedQueues(c, l.now())
	l.mu.Unlock()
	l.log.Info("fleet: the operator's control changed; applied live", "version", c.Version, "change", c.Change.What,
		"queue", c.Change.Queue, "reason", c.Change.Reason, "by", c.Change.By, "paused_queues", paused, "settings", applied.Flags())
	signal(l.changed)
}

// setRate makes rate the --rate-limit in force. l.mu is held.
func (l *Limiter) setRate(rate float64) {
	l.cfg.Rate = rate
	if t := l.tokens[ledgerRate]; t != nil && rate > 0 {
		t.rate, t.capacity, t.window = rate, RateCapacity(rate), RateWindow(rate)
	}
}

// setConcurrency makes n the --fleet-concurrency in force: the slots held beyond it go back
// as their runs end. l.mu is held.
func (l *Limiter) setConcurrency(n int) {
	l.cfg.Concurrency = n
	if s := l.slots[ledgerConcurrency]; s != nil && n > 0 {
		s.capacity = n
	}
}

// record writes the task's record: who it is, what it runs and which control it applies.
func (r *caller) record(ctx context.Context) {
	l := r.l
	now := l.now()
	m := l.cfg.Member
	l.mu.Lock()
	rec := TaskRecord{Task: l.cfg.Task, Host: m.Host, Queues: m.Queues, Paused: m.pausedQueues(l.fleet.control, now),
		Version: l.fleet.control.Version, Running: l.running, Concurrency: m.Concurrency, BatchSize: m.BatchSize,
		Applied: l.fleet.applied, LastSeen: now, LiveUntil: now.Add(l.cfg.Lease)}
	l.mu.Unlock()
	err := l.store.PutTask(ctx, rec)
	if err != nil {
		r.nextRecord = now.Add(r.retryDelay())
	}
	r.done(err)
}

// beat records the task as live and reads the fleet row in the same call.
func (r *caller) beat(ctx context.Context) {
	now := r.l.now()
	var gone []string
	for task, until := range r.fleet.Tasks {
		if task != r.l.cfg.Task && now.Sub(until) > goneAfter {
			gone = append(gone, task)
		}
	}
	f, err := r.l.store.Beat(ctx, r.l.cfg.Task, now.Add(LiveFor), gone)
	if err != nil {
		r.nextBeat = now.Add(r.retryDelay())
	} else {
		r.seen(f)
	}
	r.done(err)
}

// poll reads the fleet row for a pause.
func (r *caller) poll(ctx context.Context) {
	f, err := r.l.store.Fleet(ctx)
	if err != nil {
		r.nextPoll = r.l.now().Add(r.retryDelay())
	} else {
		r.seen(f)
	}
	r.done(err)
}

// seen takes in the fleet row: its pause and how many tasks are live.
func (r *caller) seen(f Fleet) {
	r.fleet = f
	r.l.applyControl(f.Control)
	now := r.l.now()
	r.l.mu.Lock()
	if f.PauseUntil.After(r.l.pauseUntil) {
		r.l.pauseUntil = f.PauseUntil
	}
	r.l.live = f.Live(now)
	r.l.mu.Unlock()
}

// writePause writes a pause asked here to the fleet row.
func (r *caller) writePause(until time.Time) call {
	return func(ctx context.Context) {
		err := r.l.store.Pause(ctx, until)
		r.l.mu.Lock()
		if err == nil && r.l.pauseAsked.Equal(until) {
			r.l.pauseAsked = time.Time{}
		}
		r.l.mu.Unlock()
		if err != nil {
			r.nextPause = r.l.now().Add(r.retryDelay())
		}
		r.done(err)
	}
}
