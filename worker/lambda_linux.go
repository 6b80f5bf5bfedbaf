package worker

import (
	"fmt"
	"log/slog"
	"os/exec"
	"syscall"
	"time"
)

// startRuntime starts rt's process in its own process group, killed if watchbot dies, its
// output logged; rt.exited closes once it has exited.
func startRuntime(rt *runtimeEnv, command, env []string, log *slog.Logger) error {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = env
	stdout, stderr := &lineWriter{l: lineLog{stream: "stdout", log: log}}, &lineWriter{l: lineLog{stream: "stderr", log: log}}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// The group's processes may keep the output open after the runtime exits.
	cmd.WaitDelay = rt.grace + time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the runtime: %w", err)
	}
	pgid := cmd.Process.Pid
	rt.signal = func(term bool) {
		sig := syscall.SIGKILL
		if term {
			sig = syscall.SIGTERM
		}
		_ = signalGroup(pgid, sig)
	}
	go func() { // ended by the process's exit; keep waits for exited
		rt.err = cmd.Wait()
		// Wait has returned, so the copying goroutines have too.
		stdout.l.flush()
		stderr.l.flush()
		_ = signalGroup(pgid, syscall.SIGKILL) // what it left behind in its group
		close(rt.exited)
	}()
	return nil
}

// lineWriter logs a runtime's output stream a line at a time, as Lambda sends it to
// CloudWatch. os/exec copies into each writer that is not a file from one goroutine of its
// own, so no lock is needed, and none is held while a line is logged.
type lineWriter struct{ l lineLog }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.l.write(p)
	return len(p), nil
}
