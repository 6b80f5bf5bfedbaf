//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestLocalSQSScript runs scripts/local-sqs (make emulator) as a developer would: it pastes
// the commands the script prints into a shell, with the test's binary for bin/watchbot and a
// worker that succeeds for ./your-worker (the listen that names every queue, the tables and the
// bucket), then stops the script and finds no emulator left.
func TestLocalSQSScript(t *testing.T) {
	t.Parallel()
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
		name   string
		queues string // QUEUES, or QUEUE when it names one
		fifo   string
		stop   syscall.Signal
	}{
		{"two standard queues, stopped by SIGINT", "QUEUES=jobs,bulk", "", syscall.SIGINT},
		{"FIFO queue, stopped by SIGTERM", "QUEUE=local-sqs-test-" + strconv.Itoa(os.Getpid()), "1", syscall.SIGTERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(script)
			cmd.Env = testenv.CleanEnv(t, "FAUXQS_PORT=0", "DYNALITE_PORT=0", tt.queues, "MAX_RECEIVE_COUNT=2", "FIFO="+tt.fifo)
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
			// printed returns the first line printed that starts with prefix and holds each of has.
			printed := func(prefix string, has ...string) string {
				t.Helper()
				for line := range strings.Lines(out.String()) {
					line = strings.TrimSpace(line)
					if strings.HasPrefix(line, prefix) && !slices.ContainsFunc(has, func(s string) bool { return !strings.Contains(line, s) }) {
						return line
					}
				}
				t.Fatalf("local-sqs printed no line starting with %q holding %q:\n%s", prefix, has, out.String())
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
			listen, log := paste(printed("bin/watchbot listen ", "--dedupe-table"))
			testenv.Eventually(t, "the message to be processed", 30*time.Second, func() bool {
				return testenv.Logged(log.String(), "outcome", "delete")
			}, log.String)
			_ = listen.Cmd.Process.Kill()
			listen.Wait(t, 10*time.Second)
			endpoint, _ := strings.CutPrefix(strings.Fields(export)[1], "AWS_ENDPOINT_URL_SQS=")
			for line := range strings.Lines(out.String()) {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "queue" {
					if counts := testenv.Depth(t, testenv.ClientFor(endpoint), f[2]); counts.Total() != 0 {
						t.Errorf("queue %s holds %+v after the message was processed", f[1], counts)
					}
				}
			}
			for _, prefix := range []string{"bin/watchbot dead-letter ", "bin/watchbot progress "} {
				cmd, log := paste(printed(prefix))
				if code := cmd.Wait(t, 60*time.Second, log.String); code != 0 {
					t.Errorf("%sexit %d:\n%s", prefix, code, log)
				}
			}

			port, _ := strconv.ParseInt(endpoint[strings.LastIndex(endpoint, ":")+1:], 10, 32)
			if addrs := listeningOn(t, int(port)); len(addrs) != 1 || addrs[0] != "127.0.0.1" {
				t.Errorf("the emulator listens on %v, want 127.0.0.1 alone", addrs)
			}

			emulators := emulatorsOf(t, local.Cmd.Process.Pid)
			if err := local.Cmd.Process.Signal(tt.stop); err != nil {
				t.Fatal(err)
			}
			if code := local.Wait(t, 30*time.Second, errOut.String); code != 0 {
				t.Errorf("local-sqs exit %d after %v, want 0:\n%s", code, tt.stop, errOut.String())
			}
			for _, pid := range emulators {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("an emulator (pid %d) outlived local-sqs: kill -0 says %v", pid, err)
				}
			}
		})
	}
}

// emulatorsOf returns the ids of the emulator processes that the process pid started (SQS
// and DynamoDB), from /proc.
func emulatorsOf(t *testing.T, pid int) []int {
	t.Helper()
	var ids []int
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
		if cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline")); strings.Contains(string(cmdline), "-server.mjs") {
			id, _ := strconv.Atoi(filepath.Base(dir))
			ids = append(ids, id)
		}
	}
	if len(ids) != 2 {
		t.Fatalf("%d emulator processes (*-server.mjs) under local-sqs (pid %d) in /proc, want 2", len(ids), pid)
	}
	return ids
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

// TestLocalSQSPortTaken runs scripts/local-sqs with the SQS or the DynamoDB emulator's port
// already taken: one line says so and how to pick another, and the exit is 2.
func TestLocalSQSPortTaken(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, variable := range []string{"FAUXQS_PORT", "DYNALITE_PORT"} {
		t.Run(variable, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			port := taken.Addr().(*net.TCPAddr).Port
			cmd := exec.Command(filepath.Join(root, "scripts", "local-sqs"))
			cmd.Env = testenv.CleanEnv(t, "FAUXQS_PORT=0", "DYNALITE_PORT=0", variable+"="+strconv.Itoa(port))
			var out, errOut testenv.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, errOut.String)
			if code != 2 || out.String() != "" || strings.Count(errOut.String(), "\n") != 1 ||
				!strings.Contains(errOut.String(), "port "+strconv.Itoa(port)+" on 127.0.0.1 is taken") || !strings.Contains(errOut.String(), variable+"=") {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and one line naming the port and %s", code, out.String(), errOut.String(), variable)
			}
		})
	}
}
