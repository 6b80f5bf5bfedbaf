package supervisor

import (
	"context"
	"sync"
	"time"
)

// cutoff is a stop's last moment: once it is set, every call watchbot makes to SQS or
// DynamoDB ends by then, those under way and those to come (the acknowledger's, the
// dead-letter sends, the dedupe table's), so a stop ends in its window whatever the services
// do. A call cut short fails as a timeout would: a message whose delete, dead-letter send or
// release did not go out stays in the queue and is visible again when its lease ends. A nil
// *cutoff never cuts.
//
// mu guards the moment, its timer, and the calls under way; each call's cancel runs after the
// lock is released.
type cutoff struct {
	mu     sync.Mutex
	at     time.Time
	timer  *time.Timer
	passed bool // the cutoff has come: a call cut from now on ends at once
	// calls are how to end each call under way, by the number cuts gave it.
	calls map[uint64]func()
	next  uint64
}

func newCutoff() *cutoff { return &cutoff{calls: map[uint64]func(){}} }

// set makes every call end by at. The earliest cutoff counts.
func (c *cutoff) set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		if !at.Before(c.at) {
			return
		}
		c.timer.Stop()
	}
	c.at, c.timer = at, time.AfterFunc(time.Until(at), c.pass)
}

// pass ends every call under way, and every later one at once.
func (c *cutoff) pass() {
	c.mu.Lock()
	c.passed = true
	calls := c.calls
	c.calls = map[uint64]func(){}
	c.mu.Unlock()
	for _, end := range calls {
		end()
	}
}

// release stops the cutoff's timer, once nothing is left to cut.
func (c *cutoff) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
}

// bound returns ctx bounded by timeout, and ended at the cutoff too.
func (c *cutoff) bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	undo := c.cuts(cancel)
	return ctx, func() { undo(); cancel() }
}

// cuts ends cancel at the cutoff, at once if it has come; the returned func undoes that, and
// reports whether it did so before the cutoff.
func (c *cutoff) cuts(cancel context.CancelFunc) (undo func() bool) {
	if c == nil {
		return func() bool { return false }
	}
	c.mu.Lock()
	if c.passed {
		c.mu.Unlock()
		cancel()
		return func() bool { return false }
	}
	id := c.next
	c.next++
	c.calls[id] = cancel
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, waiting := c.calls[id]
		delete(c.calls, id)
		return waiting
	}
}
