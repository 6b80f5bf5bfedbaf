package limits

import (
	"context"
	"time"
)

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
