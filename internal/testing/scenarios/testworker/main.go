//go:build linux

// Command testworker is the worker the fault-injection scenarios of internal/testing/scenarios run
// under watchbot. It does what the message tells it (succeed, fail, hang, kill itself, fork a
// child that outlives it, flood stdout ...) and records every run in a trace file, so the
// scenario can check at the end that no message was lost and none ran twice at once.
//
// Usage:
//
//	testworker -trace FILE -locks DIR
//
// A body that is a JSON object with a "key" and a "plan" is a planned message:
//
//	{"key":"s1-17","plan":["fail","ok"]}
//
// runs plan[attempt-1] (the last step for later attempts), attempt being WATCHBOT_ATTEMPT.
// Steps: ok, fail (exit 1), reject (exit 3), release (exit 4), sleep:MS (then ok),
// hang (sleep for an hour), sigkill (SIGKILL itself), fork:MS (start a child in the same
// process group that sleeps MS and holds the message's lock, then exit 0), closeout (close
// stdout, then exit 0 after 200 ms), flood:MIB (write MIB MiB to stdout, then exit 0).
// Any other body is recorded (hashes of stdin, the message file, $Message, $Subject and
// the WATCHBOT_ATTR_ variables) and acknowledged; its key is its MessageId.
//
// Each line of the trace is written with one write(2) on a file opened with O_APPEND, so
// concurrent workers never interleave:
//
//	start KEY ID ATTEMPT PID MONO_NS RECEIVES
//	end KEY ID ATTEMPT PID MONO_NS RESULT
//	overlap KEY ID ATTEMPT PID MONO_NS
//	child KEY ID ATTEMPT CHILD_PID MONO_NS
//	seen KEY ID ATTEMPT PID MONO_NS JSON
//
// MONO_NS is CLOCK_MONOTONIC, comparable between processes; RECEIVES is the message's
// ApproximateReceiveCount. A worker also holds an
// exclusive flock(2) on a file named after its key while it runs; if another process (a
// concurrent run of the same message, or a child of an earlier run that outlived it) holds
// it, the worker writes an overlap line. The kernel drops the lock when its holders die,
// however they die, so runs that end without an end line are covered too.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		child(os.Args[2:])
		return
	}
	trace := flag.String("trace", "", "trace file (appended to)")
	locks := flag.String("locks", "", "directory of per-message lock files")
	flag.Parse()
	if *trace == "" || *locks == "" {
		fmt.Fprintln(os.Stderr, "testworker: -trace and -locks are required")
		os.Exit(2)
	}
	os.Exit(run(*trace, *locks))
}

// planned is the body of a planned message.
type planned struct {
	Key  string   `json:"key"`
	Plan []string `json:"plan"`
}

type worker struct {
	trace   *os.File
	key, id string
	attempt int
}

func (w *worker) record(kind string, pid int, extra ...string) {
	line := fmt.Sprintf("%s %s %s %d %d %d", kind, w.key, w.id, w.attempt, pid, mono())
	for _, e := range extra {
		line += " " + e
	}
	// One write on an O_APPEND file: lines of concurrent workers never interleave.
	if _, err := w.trace.Write([]byte(line + "\n")); err != nil {
		fmt.Fprintln(os.Stderr, "testworker: trace:", err)
	}
}

func run(tracePath, locks string) int {
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker: read stdin:", err)
		return 1
	}
	trace, err := os.OpenFile(tracePath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		return 1
	}
	defer trace.Close()
	w := &worker{trace: trace, id: os.Getenv("MessageId")}
	w.attempt, _ = strconv.Atoi(os.Getenv("WATCHBOT_ATTEMPT"))
	var p planned
	if json.Unmarshal(body, &p) != nil || p.Key == "" || len(p.Plan) == 0 {
		p = planned{Key: w.id}
	}
	w.key = p.Key

	lock, err := os.OpenFile(filepath.Join(locks, lockName(w.key)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		return 1
	}
	defer lock.Close()
	pid := os.Getpid()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		w.record("overlap", pid)
	}
	w.record("start", pid, os.Getenv("ApproximateReceiveCount"))
	if p.Plan == nil {
		w.record("seen", pid, seen(body))
		w.record("end", pid, "ok")
		return 0
	}
	step := p.Plan[min(max(w.attempt, 1), len(p.Plan))-1]
	action, arg, _ := strings.Cut(step, ":")
	n, _ := strconv.Atoi(arg)
	code := 0
	switch action {
	case "ok":
	case "fail":
		code = 1
	case "reject":
		code = 3
	case "release":
		code = 4
	case "sleep":
		time.Sleep(time.Duration(n) * time.Millisecond)
	case "hang":
		time.Sleep(time.Hour)
	case "sigkill":
		w.record("end", pid, "sigkill")
		_ = syscall.Kill(pid, syscall.SIGKILL)
		time.Sleep(time.Minute)
	case "fork":
		c := exec.Command(os.Args[0], "child", strconv.Itoa(n))
		// The child shares stdout/stderr and the lock, as a `cmd &` in a shell would.
		c.Stdout, c.Stderr, c.ExtraFiles = os.Stdout, os.Stderr, []*os.File{lock}
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "testworker: fork:", err)
			code = 1
			break
		}
		w.record("child", c.Process.Pid)
	case "closeout":
		os.Stdout.Close()
		fmt.Fprintln(os.Stderr, "stdout closed")
		time.Sleep(200 * time.Millisecond)
	case "flood":
		line := []byte(strings.Repeat("x", 4095) + "\n")
		for range n * 256 {
			if _, err := os.Stdout.Write(line); err != nil {
				fmt.Fprintln(os.Stderr, "testworker: flood:", err)
				code = 1
				break
			}
		}
	default:
		fmt.Fprintf(os.Stderr, "testworker: unknown step %q\n", step)
		code = 1
	}
	w.record("end", pid, resultName(code))
	return code
}

func resultName(code int) string {
	switch code {
	case 0:
		return "ok"
	case 3:
		return "reject"
	case 4:
		return "release"
	default:
		return "fail"
	}
}

// child sleeps, holding the lock it inherited as fd 3, outliving the worker that forked it.
func child(args []string) {
	ms, _ := strconv.Atoi(args[0])
	time.Sleep(time.Duration(ms) * time.Millisecond)
}

// seen describes what the worker was given, as JSON: hashes of the body on stdin, in the
// message file and in $Message (null when unset), $Subject, and the attribute variables.
func seen(stdin []byte) string {
	file, err := os.ReadFile(os.Getenv("WATCHBOT_MESSAGE_FILE"))
	if err != nil {
		file = []byte("unreadable: " + err.Error())
	}
	s := struct {
		Stdin   string            `json:"stdin"`
		File    string            `json:"file"`
		Env     *string           `json:"env"`
		Subject *string           `json:"subject"`
		Attrs   map[string]string `json:"attrs"`
		Names   []string          `json:"names"`
	}{Stdin: hash(stdin), File: hash(file), Attrs: map[string]string{}}
	if v, ok := os.LookupEnv("Message"); ok {
		h := hash([]byte(v))
		s.Env = &h
	}
	if v, ok := os.LookupEnv("Subject"); ok {
		s.Subject = &v
	}
	for _, kv := range os.Environ() {
		if name, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, "WATCHBOT_ATTR_") {
			s.Attrs[name] = v
			s.Names = append(s.Names, name)
		}
	}
	sort.Strings(s.Names)
	out, _ := json.Marshal(s)
	return string(out)
}

func hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func lockName(key string) string { return hash([]byte(key))[:24] }

func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
