//go:build linux

package worker

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// The spawn benchmarks report, beside the time per run, watchbot's own CPU per run (its
// children's excluded), the figure that bounds its throughput on a busy machine.

func BenchmarkRunWorker(b *testing.B) {
	p := filepath.Join(b.TempDir(), "m")
	os.WriteFile(p, []byte("x"), 0o600)
	log := slog.New(slog.DiscardHandler)
	env := testenv.CleanEnv(b)
	cpu := ownCPU()
	for b.Loop() {
		spawn(context.Background(), Spec{Command: []string{"/usr/bin/true"}, Env: env, StdinPath: p, KillGrace: 5 * time.Second}, log)
	}
	b.ReportMetric(float64(ownCPU()-cpu)/float64(b.N)/1e3, "own-cpu-µs/op")
}

// BenchmarkExecRun is the floor: os/exec with no pipes, no process group, no context.
func BenchmarkExecRun(b *testing.B) {
	env := testenv.CleanEnv(b)
	cpu := ownCPU()
	for b.Loop() {
		cmd := exec.Command("/usr/bin/true")
		cmd.Env = env
		cmd.Run()
	}
	b.ReportMetric(float64(ownCPU()-cpu)/float64(b.N)/1e3, "own-cpu-µs/op")
}

// ownCPU is this process's user and system time so far, its children's excluded.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
