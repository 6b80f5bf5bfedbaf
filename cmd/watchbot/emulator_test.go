//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestLocalSQSScript runs scripts/local-sqs (make emulator) as a developer would: it pastes
// the commands the script prints into a shell, with the test's binary for bin/watchbot and a
// worker that succeeds for ./your-worker, then stops the script and finds no emulator left.
func TestLocalSQSScript(t *testing.T) {
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "local-sqs")
	install := exec.Command(script, "--install")
	if out, err := install.CombinedOutput(); err != nil {
		testenv.Require(t, "SQS emulator did not install", fmt.Errorf("%w\n%s", err, out))
	}
	bin := testenv.Binary(t)
	tests := []struct {
		name string
		fifo string
		stop syscall.Signal
	}{
		{"standard queue, stopped by SIGINT", "", syscall.SIGINT},
		{"FIFO queue, stopped by SIGTERM", "1", syscall.SIGTERM},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue := "local-sqs-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
			cmd := exec.Command(script)
			cmd.Env = testenv.CleanEnv(t, "FAUXQS_PORT=0", "QUEUE="+queue, "MAX_RECEIVE_COUNT=2", "FIFO="+tt.fifo)
			var out, errOut testenv.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			local := testenv.Spawn(t, cmd)
			testenv.Eventually(t, "local-sqs to print its commands", 60*time.Second, func() bool {
				select {
				case <-local.Done():
					t.Fatalf("local-sqs exited early:\n%s%s", out.String(), errOut.String())
				default:
				}
				return strings.Contains(out.String(), " peek\n")
			}, errOut.String)
			printed := func(prefix string) string {
				t.Helper()
				for line := range strings.Lines(out.String()) {
					if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
						return line
					}
				}
				t.Fatalf("local-sqs printed no line starting with %q:\n%s", prefix, out.String())
				return ""
			}
			export := printed("export ")
			// paste runs a printed command in a shell after the printed export.
			paste := func(line string) (*testenv.Process, *testenv.Buffer) {
				line = strings.Replace(line, "bin/watchbot", "'"+bin+"'", 1)
				line = strings.Replace(line, "./your-worker", "sh -c 'exit 0'", 1)
				cmd := exec.Command("bash", "-c", export+"\nexec "+line)
				cmd.Env = testenv.CleanEnv(t) // the printed export is all the AWS set-up there is
				log := &testenv.Buffer{}
				cmd.Stdout, cmd.Stderr = log, log
				return testenv.Spawn(t, cmd), log
			}

			send, log := paste(printed("bin/watchbot send "))
			if code := send.Wait(t, 60*time.Second, log.String); code != 0 {
				t.Fatalf("send exit %d:\n%s", code, log)
			}
			listen, log := paste(printed("bin/watchbot listen "))
			testenv.Eventually(t, "the message to be processed", 30*time.Second, func() bool {
				return strings.Contains(log.String(), `"msg":"message done"`)
			}, log.String)
			_ = listen.Cmd.Process.Kill()
			listen.Wait(t, 10*time.Second)
			endpoint, _ := strings.CutPrefix(strings.Fields(export)[1], "AWS_ENDPOINT_URL_SQS=")
			url := strings.Fields(printed("work queue:"))[2]
			if counts := testenv.Depth(t, testenv.ClientFor(endpoint), url); counts.Total() != 0 {
				t.Errorf("queue holds %+v after the message was processed", counts)
			}
			peek, log := paste(printed("bin/watchbot dead-letter "))
			if code := peek.Wait(t, 60*time.Second, log.String); code != 0 {
				t.Errorf("dead-letter peek exit %d:\n%s", code, log)
			}

			port, _ := strconv.ParseInt(endpoint[strings.LastIndex(endpoint, ":")+1:], 10, 32)
			if addrs := listeningOn(t, int(port)); len(addrs) != 1 || addrs[0] != "127.0.0.1" {
				t.Errorf("the emulator listens on %v, want 127.0.0.1 alone", addrs)
			}

			emulator := emulatorOf(t, local.Cmd.Process.Pid)
			if err := local.Cmd.Process.Signal(tt.stop); err != nil {
				t.Fatal(err)
			}
			if code := local.Wait(t, 30*time.Second, errOut.String); code != 0 {
				t.Errorf("local-sqs exit %d after %v, want 0:\n%s", code, tt.stop, errOut.String())
			}
			if err := syscall.Kill(emulator, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("the emulator (pid %d) outlived local-sqs: kill -0 says %v", emulator, err)
			}
		})
	}
}

// emulatorOf returns the id of the emulator process that the process pid started, from /proc.
func emulatorOf(t *testing.T, pid int) int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		dir := filepath.Dir(stat)
		if cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline")); strings.Contains(string(cmdline), "fauxqs-server.mjs") {
			id, _ := strconv.Atoi(filepath.Base(dir))
			return id
		}
	}
	t.Fatalf("no fauxqs-server.mjs process under local-sqs (pid %d) in /proc", pid)
	return 0
}

// listeningOn returns the addresses with a TCP socket listening on port, from /proc/net/tcp and
// tcp6: "127.0.0.1", "0.0.0.0", or the hex of an IPv6 address.
func listeningOn(t *testing.T, port int) []string {
	t.Helper()
	var addrs []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			// sl local_address rem_address st …; 0A is LISTEN.
			if len(f) < 4 || f[3] != "0A" {
				continue
			}
			hexAddr, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err != nil || int(p) != port {
				continue
			}
			switch hexAddr {
			case "0100007F":
				addrs = append(addrs, "127.0.0.1")
			case "00000000":
				addrs = append(addrs, "0.0.0.0")
			default:
				addrs = append(addrs, hexAddr)
			}
		}
	}
	return addrs
}

// TestLocalSQSPortTaken runs scripts/local-sqs on a port already taken: one line says so and
// how to pick another, and the exit is 2.
func TestLocalSQSPortTaken(t *testing.T) {
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	cmd := exec.Command(filepath.Join(root, "scripts", "local-sqs"))
	cmd.Env = testenv.CleanEnv(t, "FAUXQS_PORT="+strconv.Itoa(port))
	var out, errOut testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, errOut.String)
	if code != 2 || out.String() != "" || strings.Count(errOut.String(), "\n") != 1 ||
		!strings.Contains(errOut.String(), "port "+strconv.Itoa(port)+" on 127.0.0.1 is taken") || !strings.Contains(errOut.String(), "FAUXQS_PORT=") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and one line naming the port and FAUXQS_PORT", code, out.String(), errOut.String())
	}
}
