package worker

// The Lambda kind's runtimes: each kept by a goroutine of its own that starts it, waits for
// its init, offers it for work, and replaces it when it ends.

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/watchbot/watchbot/worker/lambda"
)

// runtimeEnv is one runtime process and the APIs it calls: an execution environment.
type runtimeEnv struct {
	slot int
	srv  *lambda.Server
	// exited is closed once the process has exited and been waited for; err says how.
	exited chan struct{}
	err    error
	// signal signals the runtime's process group.
	signal   func(term bool)
	killOnce sync.Once
	grace    time.Duration
}

// kill stops the runtime: SIGTERM to its process group, SIGKILL after the grace. Its keeper
// starts another.
func (rt *runtimeEnv) kill() {
	rt.killOnce.Do(func() {
		rt.signal(true)
		go func() { // ended by the exit, which the keeper waits for
			select {
			case <-rt.exited:
			case <-time.After(rt.grace):
				rt.signal(false)
			}
		}()
	})
}

// drain ends the runtime at a stop: SHUTDOWN to its extensions, then kill, and waits for it.
func (rt *runtimeEnv) drain() {
	rt.srv.Shutdown(time.Now().Add(rt.grace))
	rt.kill()
	<-rt.exited
}

// errInitTimeout, errExitedInInit: how an init fails without an /init/error.
var (
	errInitTimeout  = errors.New("no /next within --lambda-init-timeout")
	errExitedInInit = errors.New("exited before its first /next")
)

// keep keeps runtime slot running until Stop: it starts it, waits for its init (reporting
// the first success on up), offers it for work, and starts another when it ends. A failed
// init is logged and retried after a capped backoff.
func (l *Lambda) keep(slot int, up chan<- struct{}) {
	log := l.cfg.Log.With("runtime", slot)
	for failures, first := 0, true; ; {
		rt, err := l.launch(slot, log)
		if err == nil {
			if err = l.awaitInit(rt); err != nil {
				rt.kill()
				<-rt.exited
				rt.srv.Close()
			}
		}
		l.initEnded(slot, err)
		if err != nil {
			failures++
			delay := l.restartDelay(failures)
			log.Error("lambda runtime failed its init; restarting it", "error", err, "attempt", failures, "retry_in", delay.String())
			select {
			case <-time.After(delay):
				continue
			case <-l.stop:
				return
			}
		}
		failures = 0
		if first {
			up <- struct{}{}
			first = false
		}
		l.idle <- rt
		select {
		case <-rt.exited:
			log.Warn("lambda runtime exited; starting another", "error", rt.err)
			rt.srv.Close()
		case <-l.stop:
			rt.drain()
			rt.srv.Close()
			return
		}
	}
}

// awaitInit waits for the runtime's first /next, within InitTimeout.
func (l *Lambda) awaitInit(rt *runtimeEnv) error {
	timer := time.NewTimer(l.cfg.Lambda.InitTimeout)
	defer timer.Stop()
	select {
	case <-rt.srv.Asked():
		return nil
	case fe := <-rt.srv.InitError():
		return fmt.Errorf("/init/error: %w", fe)
	case <-rt.exited:
		return fmt.Errorf("%w: %v", errExitedInInit, rt.err)
	case <-timer.C:
		return fmt.Errorf("%w (%v)", errInitTimeout, l.cfg.Lambda.InitTimeout)
	case <-l.stop:
		return errors.New("stopped during init")
	}
}

// launch starts runtime slot and its APIs on a port of its own on loopback.
func (l *Lambda) launch(slot int, log *slog.Logger) (*runtimeEnv, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the runtime API: %w", err)
	}
	rt := &runtimeEnv{slot: slot, srv: lambda.NewServer(l.fn), exited: make(chan struct{}), grace: l.cfg.KillGrace}
	served := make(chan struct{})
	go func() { // ended by srv.Close, which every path of keep calls
		defer close(served)
		if err := rt.srv.Serve(ln); err != nil {
			log.Error("the runtime API stopped", "error", err)
		}
	}()
	env := slices.Concat(inheritedEnv(l.cfg.Environ), l.lambdaEnv(l.cfg.Environ, ln.Addr().String()))
	if err := startRuntime(rt, l.command, env, log); err != nil {
		rt.srv.Close()
		<-served
		return nil, err
	}
	return rt, nil
}

// lambdaEnv is the variables Lambda sets for a runtime: the Runtime API's address always,
// the others unless environ already sets them.
func (l *Lambda) lambdaEnv(environ []string, api string) []string {
	wd, _ := os.Getwd()
	set := func(name string) bool {
		return slices.ContainsFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	}
	env := []string{"AWS_LAMBDA_RUNTIME_API=" + api}
	for _, kv := range [][2]string{
		{"AWS_LAMBDA_FUNCTION_NAME", l.fn.Name},
		{"AWS_LAMBDA_FUNCTION_VERSION", l.fn.Version},
		{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE", strconv.FormatInt(memoryMB(), 10)},
		{"AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/" + l.fn.Name},
		{"AWS_LAMBDA_LOG_STREAM_NAME", time.Now().UTC().Format("2006/01/02") + "/[" + l.fn.Version + "]" + strings.ReplaceAll(requestID(), "-", "")},
		{"AWS_REGION", l.region},
		{"LAMBDA_TASK_ROOT", wd},
		{"_HANDLER", l.fn.Handler},
	} {
		if kv[1] != "" && !set(kv[0]) {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// memoryMB is the memory the runtime may use, in MB: the cgroup's limit, else the host's.
func memoryMB() int64 {
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return n >> 20
		}
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb >> 10
		}
	}
	return 0
}
