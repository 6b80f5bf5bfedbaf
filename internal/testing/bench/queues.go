//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// queuesMessages is how many messages each run of the queues lane empties.
const queuesMessages = 2000

// twoQueues is the queues lane: what serving several queues costs in throughput. It empties
// queuesMessages messages with `watchbot listen --concurrency C -- WORKER` (the throughput
// lane's slots and worker) from one queue holding them all, and, at the same time, as many
// from two queues holding half each (--queue-url twice, weighted 1:1), and returns the rate
// with two queues divided by the rate with one. The two run at once, so the rest of the
// machine's load costs both alike. name prefixes its queues.
func (b *bench) twoQueues(ctx context.Context, name string) (float64, error) {
	direct := b.fauxqs.Client()
	one, err := newQueue(ctx, direct, name+"-one", queuesMessages, 0)
	if err != nil {
		return 0, err
	}
	first, err := newQueue(ctx, direct, name+"-a", queuesMessages/2, 0)
	if err != nil {
		return 0, err
	}
	second, err := newQueue(ctx, direct, name+"-b", queuesMessages-queuesMessages/2, 0)
	if err != nil {
		return 0, err
	}
	var took [2]time.Duration
	var errs [2]error
	var wg sync.WaitGroup
	for i, queues := range [][]string{{one}, {first, second}} {
		wg.Go(func() { took[i], errs[i] = b.drainQueues(ctx, queues) })
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return 0, err
	}
	return took[0].Seconds() / took[1].Seconds(), nil
}

// drainQueues empties preloaded queues with one watchbot listen serving them all, and returns
// how long that took from the start of the process.
func (b *bench) drainQueues(ctx context.Context, queues []string) (time.Duration, error) {
	direct := b.fauxqs.Client()
	extra := []string{"--concurrency", strconv.Itoa(b.o.concurrency)}
	for _, q := range queues[1:] {
		extra = append(extra, "--queue-url", q)
	}
	start := time.Now()
	p, err := startListen(b.o, b.fauxqs, queues[0], extra, nil, b.worker)
	if err != nil {
		return 0, err
	}
	defer p.kill()
	for _, q := range queues {
		if err := p.waitEmpty(ctx, direct, q); err != nil {
			return 0, fmt.Errorf("%d queues: %w", len(queues), err)
		}
	}
	took := time.Since(start)
	return took, p.stop()
}
