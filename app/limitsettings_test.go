package app

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchbot/watchbot/limits"
)

// downStore is a limits table that never answers.
type downStore struct{}

var errDown = errors.New("table down")

func (downStore) Ledger(context.Context, string) (limits.Ledger, error) {
	return limits.Ledger{}, errDown
}
func (downStore) PutLedger(context.Context, string, int64, limits.Ledger) error { return errDown }
func (downStore) Fleet(context.Context) (limits.Fleet, error)                   { return limits.Fleet{}, errDown }
func (downStore) Beat(context.Context, string, time.Time, []string) (limits.Fleet, error) {
	return limits.Fleet{}, errDown
}
func (downStore) Leave(context.Context, string) error    { return errDown }
func (downStore) Pause(context.Context, time.Time) error { return errDown }
func (downStore) PutControl(context.Context, int64, limits.Control) error {
	return errDown
}
func (downStore) PutTask(context.Context, limits.TaskRecord) error { return errDown }
func (downStore) Task(context.Context, string) (limits.TaskRecord, bool, error) {
	return limits.TaskRecord{}, false, errDown
}

// LimitFallbackSeconds is each minute's share of the time in fallback.
func TestFallbackSeconds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := limits.DefaultConfig()
		cfg.Concurrency, cfg.Table, cfg.Task = 4, "limits", "task-a"
		lim := limits.New(cfg, downStore{}, time.Now, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { _ = lim.Run(ctx); close(done) }()
		sample := fallbackSeconds(lim)
		time.Sleep(time.Minute)
		first := sample()
		time.Sleep(time.Minute)
		second := sample()
		cancel()
		<-done
		if !lim.Snapshot().Fallback {
			t.Fatal("no fallback with the table down")
		}
		if first < 50 || first > 60 || second != 60 {
			t.Errorf("samples %v then %v, want most of the first minute (the fallback begins after 2s of failures) and all of the second", first, second)
		}
	})
}
