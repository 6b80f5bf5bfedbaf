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
type cutoff struct {
	ended context.Context // done at the cutoff
	end   context.CancelFunc
	mu    sync.Mutex
	at    time.Time
	timer *time.Timer
}

func newCutoff() *cutoff {
	ended, end := context.WithCancel(context.Background())
	return &cutoff{ended: ended, end: end}
}

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
	c.at, c.timer = at, time.AfterFunc(time.Until(at), c.end)
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
	if c == nil {
		return ctx, cancel
	}
	unhook := context.AfterFunc(c.ended, cancel)
	return ctx, func() { unhook(); cancel() }
}

// cuts ends cancel at the cutoff; the returned func undoes that.
func (c *cutoff) cuts(cancel context.CancelFunc) (undo func() bool) {
	if c == nil {
		return func() bool { return false }
	}
	return context.AfterFunc(c.ended, cancel)
}
