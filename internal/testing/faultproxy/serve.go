package faultproxy

import (
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// Serve starts a proxy with cfg in front of upstream for the rest of tb and returns it with
// its URL; with no rules it only counts requests (Stats). A proxy that cannot start skips tb,
// or fails it under CI=true, as the emulator does; one that does not close cleanly when tb
// ends fails it.
func Serve(tb testing.TB, upstream string, cfg Config) (*Proxy, string) {
	tb.Helper()
	p, err := New(upstream, cfg)
	if err != nil {
		tb.Fatalf("fault proxy configuration: %v", err)
	}
	url, err := p.Start()
	testenv.Require(tb, "fault proxy did not start", err)
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("close fault proxy: %v", err)
		}
	})
	return p, url
}
