//go:build linux

package initproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Forwarded are the signals the init passes on to watchbot: those a container is sent by its
// runtime or its operator (docker stop and ECS's StopTask send SIGTERM; docker kill --signal,
// a terminal's Ctrl-C or Ctrl-\ and a closed terminal send the others).
var Forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// self is the running executable, whatever args[0] says and wherever the working directory is.
const self = "/proc/self/exe"

// Run acts as the init when this process is PID 1: it starts the running executable again with
// args and env as its only child, and returns, once that child has exited, the code to exit
// with (see ExitCode). isInit is false, and nothing is done, when this process is not PID 1;
// the caller then goes on as usual. stderr receives the one line said when the child cannot be
// started.
func Run(args, env []string, stderr io.Writer) (code int, isInit bool) {
	if os.Getpid() != 1 {
		return 0, false
	}
	return run(self, args, env, stderr), true
}

// run starts path with args and env as the only child and acts as the init until it exits.
func run(path string, args, env []string, stderr io.Writer) int {
	// Both are asked for before the child starts, so that neither its end nor a stop sent
	// while it starts is missed. A pending SIGCHLD stands for any number of ended processes,
	// so one slot is enough for it; the forwarded signals get room of their own so that a
	// burst of orphans' SIGCHLDs cannot crowd them out.
	ended := make(chan os.Signal, 1)
	signal.Notify(ended, syscall.SIGCHLD)
	defer signal.Stop(ended)
	forward := make(chan os.Signal, 16)
	signal.Notify(forward, Forwarded...)
	defer signal.Stop(forward)

	pid, err := start(path, args, env)
	if errors.Is(err, syscall.ENOENT) && path == self {
		// No /proc in this container: find the executable as the shell would.
		if found, lookErr := exec.LookPath(args[0]); lookErr == nil {
			pid, err = start(found, args, env)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "watchbot: as PID 1, start watchbot as its child: %v\n", err)
		return 1
	}
	return supervise(pid, ended, forward, system{})
}

// start starts the child with this process's standard input, output and error. When this
// process runs in the foreground of its terminal (`docker run -it`, unshare from a shell), the
// child gets a process group of its own and the terminal's foreground: a Ctrl-C then reaches
// it once, from the terminal, and not a second time through the init (a second SIGINT tells
// listen to stop at once).
func start(path string, args, env []string) (int, error) {
	sys := &syscall.SysProcAttr{}
	if inForeground() {
		// Ctty is the terminal's descriptor in this process: standard input.
		sys.Setpgid, sys.Foreground, sys.Ctty = true, true, 0
	}
	return syscall.ForkExec(path, args, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: sys})
}

// inForeground reports whether standard input is this process's controlling terminal and this
// process's group is its foreground group.
func inForeground() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// kernel is what supervise asks of the operating system, so that tests can stand in for it.
type kernel interface {
	kill(pid int, sig syscall.Signal) error
	// reap waits for any ended child without blocking; pid is 0 when none has ended.
	reap() (pid int, status syscall.WaitStatus, err error)
}

type system struct{}

func (system) kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

func (system) reap() (int, syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
	return pid, ws, err
}

// supervise passes each signal that arrives on forward to child, and on each SIGCHLD (ended)
// reaps every child that has ended, orphans and child alike, until child is among them. It
// returns the code to exit with. The child is waited for by this same loop, never by a wait of
// its own, which the loop's wait4(-1) would race.
func supervise(child int, ended, forward <-chan os.Signal, k kernel) int {
	for {
		select {
		case sig := <-forward:
			// An error is ESRCH: the child has just ended, and its SIGCHLD is on the way.
			_ = k.kill(child, sig.(syscall.Signal))
		case <-ended:
			if code, done := reapEnded(child, k); done {
				return code
			}
		}
	}
}

// reapEnded reaps every child that has ended. done is true, with the code to exit with, when
// child was among them.
func reapEnded(child int, k kernel) (code int, done bool) {
	for {
		pid, ws, err := k.reap()
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			// ECHILD: no child is left, not even the one this init exists for. Nothing
			// remains to wait for.
			return 1, true
		case pid <= 0:
			return 0, false
		case pid == child:
			return ExitCode(ws), true
		}
	}
}

// ExitCode is the code the init exits with for its child's wait status: the child's exit code,
// or 128 plus the number of the signal that killed it, as a shell reports it (143 for SIGTERM,
// 137 for SIGKILL).
func ExitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
