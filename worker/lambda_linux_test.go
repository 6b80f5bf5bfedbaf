package worker

import (
	"log/slog"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestRuntimeOutputLogged: each line a runtime writes is logged with its stream, the last one
// too when the runtime exits without ending it.
func TestRuntimeOutputLogged(t *testing.T) {
	t.Parallel()
	var log testenv.Buffer
	rt := &runtimeEnv{exited: make(chan struct{}), grace: time.Second}
	err := startRuntime(rt, []string{"/bin/sh", "-c", `printf 'ready\nunended'; printf 'oops\n' >&2`}, nil, slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	<-rt.exited
	for _, want := range [][2]string{{"stdout", "ready"}, {"stdout", "unended"}, {"stderr", "oops"}} {
		if !testenv.Logged(log.String(), "stream", want[0], "line", want[1]) {
			t.Errorf("no record of %s line %q:\n%s", want[0], want[1], log.String())
		}
	}
}
