package supervisor

import (
	"sync"
	"sync/atomic"
)

// runPool runs each task in a goroutine of its own, which then waits for the next: a run, or
// an acknowledger's batch call, grows its goroutine's stack (the SDK's calls and the process
// start are deep), and a new goroutine for each would grow one again each time. A task goes to a goroutine that
// waits, or else to a new one; the goroutines wait until close.
type runPool struct {
	wg              sync.WaitGroup
	tasks           chan func()
	done            chan struct{}
	once, closeOnce sync.Once
	started         atomic.Int64 // goroutines started
}

func (p *runPool) init() {
	p.once.Do(func() { p.tasks, p.done = make(chan func()), make(chan struct{}) })
}

// Go runs task. It must not be called once Wait has been.
func (p *runPool) Go(task func()) {
	p.init()
	select {
	case p.tasks <- task:
		return
	default:
	}
	p.started.Add(1)
	p.wg.Go(func() {
		for ; task != nil; task = p.next() {
			task()
		}
	})
}

// next waits for a task, or returns nil when the pool closes.
func (p *runPool) next() func() {
	select {
	case t := <-p.tasks:
		return t
	case <-p.done:
		return nil
	}
}

// Wait waits for the tasks under way to end, and for the goroutines to return.
func (p *runPool) Wait() {
	p.init()
	p.closeOnce.Do(func() { close(p.done) })
	p.wg.Wait()
}
