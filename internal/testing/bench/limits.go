//go:build linux

package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/limits"
)

// limitsMessages is how many messages each run of the limits lane empties: enough that the
// limiter's first calls (its beat, its first tokens and slots) weigh little beside the
// messages, whose cost the lane is after.
const limitsMessages = 5000

// limitsRun is what one round of the limits lane measured.
type limitsRun struct {
	// ratio is the throughput with a fleet rate limit that never binds / without.
	ratio float64
	// cpuPerStart is the CPU time of one start and its end in the limiter (TryStart and
	// Permit.Done), limits never binding.
	cpuPerStart time.Duration
}

// limitsCost is the limits lane: what a fleet limit costs when it never binds. It empties a
// queue preloaded with limitsMessages messages with `watchbot listen --concurrency 8 --
// true`, without and then with `--rate-limit 1000000/s --fleet-concurrency 1000
// --limits-table` (a fresh table on the DynamoDB emulator), and returns the rate with them
// divided by the rate without. It also measures, in this process, the CPU time of the
// limiter's hot path (docs/limits.md). name prefixes its queues and table.
func (b *bench) limitsCost(ctx context.Context, name string) (limitsRun, error) {
	if b.dynamo == nil {
		d, err := testenv.StartDynamo()
		if err != nil {
			return limitsRun{}, err
		}
		b.dynamo = d
	}
	if err := testenv.CreateTable(ctx, b.dynamo.Client(), limits.TableDefinition(name)); err != nil {
		return limitsRun{}, err
	}
	var rates [2]float64
	for i, extra := range [][]string{nil, {"--rate-limit", "1000000/s", "--fleet-concurrency", "1000", "--limits-table", name}} {
		took, err := dedupeRun(ctx, b.o, fmt.Sprintf("%s-%d", name, i), b.fauxqs, b.dynamo, limitsMessages, extra)
		if err != nil {
			return limitsRun{}, fmt.Errorf("limits cost (%v): %w", extra, err)
		}
		rates[i] = float64(limitsMessages) / took.Seconds()
	}
	cpu, err := hotPathCPU()
	if err != nil {
		return limitsRun{}, err
	}
	return limitsRun{ratio: rates[1] / rates[0], cpuPerStart: cpu}, nil
}

// hotPathCPU is the CPU time this process spends on one TryStart and its Done, of a
// limiter in process whose rate and concurrency never bind, starting and ending runs for a
// second. CPU time rather than wall time: the machine's other work does not count.
func hotPathCPU() (time.Duration, error) {
	cfg := limits.DefaultConfig()
	cfg.Rate, cfg.Concurrency = limits.MaxRate, 1_000_000
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	l := limits.New(cfg, nil, time.Now, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	before, err := processCPU()
	if err != nil {
		return 0, err
	}
	starts := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		for range 1000 {
			p, ok := l.TryStart("", 1)
			if !ok {
				// Tokens not fetched yet: the limiter's goroutine is at it.
				<-l.Changed()
				continue
			}
			p.Done()
			starts++
		}
	}
	after, err := processCPU()
	if err != nil {
		return 0, err
	}
	return (after - before) / time.Duration(max(starts, 1)), nil
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
