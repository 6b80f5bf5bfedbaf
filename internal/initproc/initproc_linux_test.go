//go:build linux

package initproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// The test binary is also the program these tests start, chosen by environment variables:
// with initScript set it is an init (a child subreaper, so that orphans come to it as they
// come to PID 1) whose child is sh -c initScript; with pid1Script set it calls Run, as
// watchbot's main does, and, where Run does not take over, runs sh -c pid1Script.
const (
	initScript = "INITPROC_TEST_INIT_SCRIPT"
	pid1Script = "INITPROC_TEST_PID1_SCRIPT"
)

func TestMain(m *testing.M) {
	if script := os.Getenv(initScript); script != "" {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "become a subreaper:", err)
			os.Exit(100)
		}
		os.Exit(run("/bin/sh", []string{"sh", "-c", script}, os.Environ(), os.Stderr))
	}
	if script := os.Getenv(pid1Script); script != "" {
		if code, isInit := Run(os.Args, os.Environ(), os.Stderr); isInit {
			os.Exit(code)
		}
		err := syscall.Exec("/bin/sh", []string{"sh", "-c", script}, os.Environ())
		fmt.Fprintln(os.Stderr, "exec sh:", err)
		os.Exit(100)
	}
	os.Exit(m.Run())
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		ws   syscall.WaitStatus // as Linux encodes it: code<<8 for an exit, the signal for a kill
		want int
	}{
		{"exit 0", 0 << 8, 0},
		{"exit 1", 1 << 8, 1},
		{"exit 2", 2 << 8, 2},
		{"exit 130", 130 << 8, 130},
		{"exit 255", 255 << 8, 255},
		{"SIGTERM", syscall.WaitStatus(syscall.SIGTERM), 143},
		{"SIGKILL", syscall.WaitStatus(syscall.SIGKILL), 137},
		{"SIGINT", syscall.WaitStatus(syscall.SIGINT), 130},
		{"SIGSEGV with a core dump", syscall.WaitStatus(syscall.SIGSEGV) | 0x80, 139},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ExitCode(tt.ws); got != tt.want {
				t.Errorf("ExitCode(%#x) = %d, want %d", int(tt.ws), got, tt.want)
			}
		})
	}
}

// fakeKernel records kills and hands out scripted reaps, one batch per SIGCHLD.
type fakeKernel struct {
	kills  []string
	ended  [][]reaped // each SIGCHLD's children, in the order wait4 returns them
	reaped []int
}

type reaped struct {
	pid int
	ws  syscall.WaitStatus
	err error
}

func (k *fakeKernel) kill(pid int, sig syscall.Signal) error {
	k.kills = append(k.kills, fmt.Sprintf("%d %v", pid, sig))
	return nil
}

func (k *fakeKernel) reap() (int, syscall.WaitStatus, error) {
	if len(k.ended) == 0 || len(k.ended[0]) == 0 {
		if len(k.ended) > 0 {
			k.ended = k.ended[1:]
		}
		return 0, 0, nil
	}
	r := k.ended[0][0]
	k.ended[0] = k.ended[0][1:]
	if r.err == nil {
		k.reaped = append(k.reaped, r.pid)
	}
	return r.pid, r.ws, r.err
}

func TestSupervise(t *testing.T) {
	const child = 7
	tests := []struct {
		name      string
		signals   []os.Signal // each followed by nothing; then the SIGCHLDs, one per batch
		ended     [][]reaped
		wantKills []string
		wantReap  []int
		wantCode  int
	}{
		{
			name:      "every container signal goes to the child",
			signals:   Forwarded,
			ended:     [][]reaped{{{pid: child, ws: 0}}},
			wantKills: []string{"7 terminated", "7 interrupt", "7 hangup", "7 quit", "7 user defined signal 1", "7 user defined signal 2"},
			wantReap:  []int{child},
			wantCode:  0,
		},
		{
			name:     "orphans are reaped until the child ends",
			ended:    [][]reaped{{{pid: 20}, {pid: 21}}, {{pid: 22, ws: 1 << 8}}, {{pid: 23}, {pid: child, ws: 3 << 8}, {pid: 24}}},
			wantReap: []int{20, 21, 22, 23, child},
			wantCode: 3,
		},
		{
			name:     "an interrupted wait is retried",
			ended:    [][]reaped{{{err: syscall.EINTR}, {pid: 30}, {pid: child, ws: 4 << 8}}},
			wantReap: []int{30, child},
			wantCode: 4,
		},
		{
			name:     "a child killed by a signal",
			ended:    [][]reaped{{{pid: child, ws: syscall.WaitStatus(syscall.SIGKILL)}}},
			wantReap: []int{child},
			wantCode: 137,
		},
		{
			name:     "no child left at all",
			ended:    [][]reaped{{{pid: 40}, {err: syscall.ECHILD}}},
			wantReap: []int{40},
			wantCode: 1,
		},
		{
			name:     "a SIGCHLD with nothing ended",
			ended:    [][]reaped{{}, {{pid: child, ws: 0}}},
			wantReap: []int{child},
			wantCode: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &fakeKernel{ended: tt.ended}
			forward := make(chan os.Signal, len(tt.signals))
			for _, s := range tt.signals {
				forward <- s
			}
			// The SIGCHLDs come only once every forwarded signal has been passed on, as the
			// test reads kills without a lock.
			ended := make(chan os.Signal)
			go func() {
				for range tt.ended {
					for len(forward) > 0 {
						time.Sleep(time.Millisecond)
					}
					ended <- syscall.SIGCHLD
				}
			}()
			code := supervise(child, ended, forward, k)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
			if fmt.Sprint(k.kills) != fmt.Sprint(tt.wantKills) {
				t.Errorf("kills %q, want %q", k.kills, tt.wantKills)
			}
			if fmt.Sprint(k.reaped) != fmt.Sprint(tt.wantReap) {
				t.Errorf("reaped %v, want %v", k.reaped, tt.wantReap)
			}
		})
	}
}

// startInit starts this test binary as an init (a subreaper) of sh -c script, and returns it
// with its child's standard output.
func startInit(t *testing.T, script string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	return startTest(t, exec.Command(os.Args[0]), initScript+"="+script)
}

// startTest starts cmd, a run of this test binary, with only PATH and role in its environment,
// and returns it with its standard output. It is killed and waited for when the test ends.
func startTest(t *testing.T, cmd *exec.Cmd, role string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd.Env = []string{"PATH=/usr/bin:/bin", role}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

// waitCode waits for cmd's exit and returns its exit code.
func waitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("the init did not exit")
		return -1
	}
}

func TestRunExitsWithTheChildsCode(t *testing.T) {
	tests := []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 130", 130},
		{"kill -TERM $$", 143},
		{"kill -KILL $$", 137},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			cmd, _ := startInit(t, tt.script)
			if got := waitCode(t, cmd); got != tt.want {
				t.Errorf("exit code %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRunForwardsSignals(t *testing.T) {
	for i, sig := range Forwarded {
		name := strings.TrimPrefix(unix.SignalName(sig.(syscall.Signal)), "SIG")
		t.Run(name, func(t *testing.T) {
			want := 40 + i
			// sh runs a trap once its foreground command returns: hence the short sleeps.
			cmd, out := startInit(t, fmt.Sprintf("trap 'exit %d' %s; echo ready; while :; do sleep 0.02; done", want, name))
			if line, err := out.ReadString('\n'); line != "ready\n" {
				t.Fatalf("child said %q: %v", line, err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if got := waitCode(t, cmd); got != want {
				t.Errorf("exit code %d, want %d (the trap of the forwarded %s)", got, want, name)
			}
		})
	}
}

func TestRunReapsOrphans(t *testing.T) {
	// Each (sleep &) leaves an orphan, handed to the init; each prints its pid.
	cmd, out := startInit(t, `for i in 1 2 3 4 5; do (sleep 0.05 & echo $!); done; echo ready; exec sleep 30`)
	var orphans []int
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "ready\n" {
			break
		}
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, pid)
	}
	// The init waits for each: none is left, not even as a zombie, while the child runs on.
	testenv.Eventually(t, "the orphans to be reaped", 10*time.Second, func() bool {
		for _, pid := range orphans {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("orphans %v, zombies %v", orphans, testenv.Zombies(cmd.Process.Pid)) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := waitCode(t, cmd); got != 143 {
		t.Errorf("exit code %d, want 143 (the child killed by the forwarded SIGTERM)", got)
	}
}

func TestRunAsPID1(t *testing.T) {
	testenv.RequireRoot(t, "running the init as PID 1 of a PID namespace")
	tests := []struct {
		name   string
		script string
		signal syscall.Signal // sent to the namespace's PID 1 from outside once the child runs
		want   int
	}{
		{"exit code", "exit 5", 0, 5},
		{"SIGTERM from outside", "trap 'exit 42' TERM; echo ready; while :; do sleep 0.02; done", syscall.SIGTERM, 42},
		{"killed child", "echo ready; kill -KILL $$", 0, 137},
		{"orphans", `for i in 1 2 3; do (sleep 0.01 &); done; sleep 0.2; n=$(grep -l '^State:.*Z' /proc/[0-9]*/status | wc -l); exit $((60 + n))`, 0, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, out := startTest(t, testenv.AsPID1(os.Args[0], "-test.run=^$"), pid1Script+"="+tt.script)
			if tt.signal != 0 {
				init := testenv.NamespaceInit(t, cmd.Process.Pid, 10*time.Second)
				if line, err := out.ReadString('\n'); line != "ready\n" {
					t.Fatalf("child said %q: %v", line, err)
				}
				if err := syscall.Kill(init, tt.signal); err != nil {
					t.Fatal(err)
				}
			}
			if got := waitCode(t, cmd); got != tt.want {
				t.Errorf("exit code %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRunGivesTheChildTheTerminal(t *testing.T) {
	// The script prints its process group and its terminal's foreground group, from
	// /proc/self/stat (fields 5 and 8), then waits for a Ctrl-C.
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"PATH=/usr/bin:/bin", initScript + `=trap 'exit 42' INT; set -- $(cat /proc/$$/stat); echo "pgrp=$5 foreground=$8"; while :; do sleep 0.02; done`}
	// The init is a session leader with the terminal as its controlling terminal, in the
	// foreground, as docker run -it starts PID 1.
	term, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := bufio.NewReader(term)
	var line string
	for !strings.HasPrefix(line, "pgrp=") {
		if line, err = out.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	var pgrp, foreground int
	if _, err := fmt.Sscanf(line, "pgrp=%d foreground=%d", &pgrp, &foreground); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if pgrp == cmd.Process.Pid || pgrp != foreground {
		t.Fatalf("the child's process group is %d, the terminal's foreground %d, the init's %d: want the child's own group in the foreground",
			pgrp, foreground, cmd.Process.Pid)
	}
	// Ctrl-C: the terminal signals its foreground group, the child's alone.
	if _, err := term.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if got := waitCode(t, cmd); got != 42 {
		t.Errorf("exit code %d, want 42 (the child's trap of the Ctrl-C)", got)
	}
}
