//go:build linux

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// dedupeMessages is how many messages each run of the dedupe lane empties.
const dedupeMessages = 1000

// dedupeCost is the dedupe lane: what duplicate suppression costs in throughput. It empties
// a queue preloaded with dedupeMessages messages with `watchbot listen --concurrency 8 --
// true`, without and then with --dedupe-table (a fresh table on the DynamoDB emulator, started
// on first use; every message's key claimed, then completed), and returns the rate with it
// divided by the rate without. Each message costs two DynamoDB writes before its delete, a
// claim and a completion (docs/dedupe.md). name prefixes its queues and table.
func (b *bench) dedupeCost(ctx context.Context, name string) (float64, error) {
	if b.dynamo == nil {
		d, err := testenv.StartDynamo()
		if err != nil {
			return 0, err
		}
		b.dynamo = d
	}
	if err := testenv.CreateTable(ctx, b.dynamo.Client(), dedupe.TableDefinition(name)); err != nil {
		return 0, err
	}
	var rates [2]float64
	for i, extra := range [][]string{nil, {"--dedupe-table", name}} {
		took, err := dedupeRun(ctx, b.o, fmt.Sprintf("%s-%d", name, i), b.fauxqs, b.dynamo, dedupeMessages, extra)
		if err != nil {
			return 0, fmt.Errorf("dedupe cost (%v): %w", extra, err)
		}
		rates[i] = float64(dedupeMessages) / took.Seconds()
	}
	return rates[1] / rates[0], nil
}

// dedupeRun preloads a fresh queue named queue with messages, empties it with watchbot listen (its
// DynamoDB client pointed at dyn) and extra flags, and returns how long that took from the
// start of the process.
func dedupeRun(ctx context.Context, o options, queue string, sqsEmu *testenv.Emulator, dyn *testenv.Dynamo, messages int, extra []string) (time.Duration, error) {
	direct := sqsEmu.Client()
	q, err := newQueue(ctx, direct, queue, messages, 0)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	p, err := startListen(o, sqsEmu, q, append([]string{"--concurrency", "8"}, extra...), dyn.Env(), "true")
	if err != nil {
		return 0, err
	}
	defer p.kill()
	if err := p.waitEmpty(ctx, direct, q); err != nil {
		return 0, err
	}
	took := time.Since(start)
	return took, p.stop()
}
