package supervisor

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func BenchmarkRunWorker(b *testing.B) {
	p := filepath.Join(b.TempDir(), "m")
	os.WriteFile(p, []byte("x"), 0o600)
	log := slog.New(slog.DiscardHandler)
	for b.Loop() {
		runWorker(context.Background(), workerSpec{Command: []string{"/usr/bin/true"}, Env: os.Environ(), StdinPath: p, KillGrace: 5 * time.Second}, log)
	}
}

func BenchmarkExecRun(b *testing.B) {
	for b.Loop() {
		exec.Command("/usr/bin/true").Run()
	}
}
