package supervisor

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// Runs one after another share one goroutine; runs at once get one each; Wait waits for the
// runs under way and leaves no goroutine behind (synctest fails on one that stays blocked).
func TestRunPool(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var p runPool
		var ran atomic.Int64
		for range 5 {
			p.Go(func() { ran.Add(1) })
			synctest.Wait() // the task has run and its goroutine waits for the next
		}
		if got := p.started.Load(); got != 1 {
			t.Errorf("5 runs one after another started %d goroutines, want 1", got)
		}
		release := make(chan struct{})
		for range 3 {
			p.Go(func() {
				<-release
				ran.Add(1)
			})
		}
		synctest.Wait()
		if got := p.started.Load(); got != 3 {
			t.Errorf("3 runs at once are in %d goroutines, want 3", got)
		}
		waited := make(chan struct{})
		go func() {
			p.Wait()
			close(waited)
		}()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("Wait returned while runs were under way")
		default:
		}
		close(release)
		<-waited
		if got := ran.Load(); got != 8 {
			t.Errorf("%d tasks ran, want 8", got)
		}
	})
}
