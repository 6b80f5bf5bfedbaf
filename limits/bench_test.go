package limits

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// runningLimiter is a limiter of cfg in process, its Run going until tb ends.
func runningLimiter(tb testing.TB, cfg Config) *Limiter {
	tb.Helper()
	l := New(cfg, nil, time.Now, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	tb.Cleanup(func() { cancel(); wg.Wait() })
	return l
}

// startAndEnd is the hot path of one run: a start, and its end. A refusal (tokens not yet
// fetched) waits for Changed and counts.
func startAndEnd(l *Limiter, key string, refused *int) {
	for {
		p, ok := l.TryStart(key, 1)
		if ok {
			p.Done()
			return
		}
		*refused++
		select {
		case <-l.Changed():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func neverBinding() Config {
	cfg := DefaultConfig()
	cfg.Rate, cfg.Concurrency = MaxRate, 1_000_000
	return cfg
}

// BenchmarkTryStartDone is the cost of a run's start and end with a rate and a concurrency
// that never bind.
func BenchmarkTryStartDone(b *testing.B) {
	l := runningLimiter(b, neverBinding())
	refused := 0
	for b.Loop() {
		startAndEnd(l, "", &refused)
	}
	b.ReportMetric(float64(refused)/float64(b.N), "refusals/op")
}

// BenchmarkTryStartDoneKeyed adds per-key limits over 100 keys.
func BenchmarkTryStartDoneKeyed(b *testing.B) {
	cfg := neverBinding()
	cfg.RatePerKey, cfg.ConcurrencyPerKey = MaxRate, 1_000_000
	l := runningLimiter(b, cfg)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	refused, i := 0, 0
	for b.Loop() {
		startAndEnd(l, keys[i%len(keys)], &refused)
		i++
	}
	b.ReportMetric(float64(refused)/float64(b.N), "refusals/op")
}

// BenchmarkTryStartDoneParallel is the start and end from many goroutines at once, as
// several queues' loops and the workers' ends meet on one limiter.
func BenchmarkTryStartDoneParallel(b *testing.B) {
	l := runningLimiter(b, neverBinding())
	b.RunParallel(func(pb *testing.PB) {
		refused := 0
		for pb.Next() {
			startAndEnd(l, "", &refused)
		}
	})
}
