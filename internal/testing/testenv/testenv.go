// Package testenv gives integration tests a real SQS endpoint, the pinned fauxqs emulator, and
// a real DynamoDB endpoint, the pinned dynalite emulator (dynamo.go), each started once per test
// binary on a free port on 127.0.0.1 and reached through the real AWS SDK over HTTP. It also
// builds the watchbot binary for tests that run it as a user would, and holds the helpers every
// package's tests share: waiting for a condition (Eventually), a run function or a process (Run,
// Spawn), reading, filling and draining queues (Depth, Send, DeadLetter, Drain). It is test
// tooling: product code never imports it.
//
// When an emulator cannot start, tests are skipped on a developer's machine and fail under
// CI=true, so CI never passes without having run them.
package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Region is the region every test client uses.
const Region = "us-east-1"

// Emulator is a running fauxqs.
type Emulator struct {
	// Endpoint is the emulator's base URL, always on 127.0.0.1.
	Endpoint string
}

var (
	startOnce sync.Once
	shared    *Emulator
	startErr  error
	// lifelines are the write ends of the servers' stdin (startServer). They must stay
	// reachable: if one were garbage-collected its finalizer would close it and its server
	// would exit.
	lifelines   []io.WriteCloser
	lifelinesMu sync.Mutex
)

// SQS returns the shared emulator, starting it on first use. It fails the test under CI=true
// and skips it elsewhere when the emulator cannot start.
func SQS(tb testing.TB) *Emulator {
	tb.Helper()
	startOnce.Do(func() { shared, startErr = Start() })
	Require(tb, "SQS emulator did not start", startErr)
	return shared
}

// Root returns the repository root (the directory holding go.mod).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start installs (when needed) and starts a new emulator on a free port of 127.0.0.1. It
// runs until this process exits. Tests use SQS, which shares one emulator per test binary.
func Start() (*Emulator, error) {
	port, err := startServer("emulator", "fauxqs-server.mjs", "fauxqs listening on port ",
		"FAUXQS_PORT=0", "FAUXQS_EXIT_ON_STDIN_CLOSE=1")
	if err != nil {
		return nil, err
	}
	return &Emulator{Endpoint: "http://127.0.0.1:" + port}, nil
}

// startServer installs the pinned npm packages (when needed), then runs the node script of
// this directory with env added, and returns the port it announces in its first line, which
// starts with announce. The server runs until this process exits: it exits when its stdin
// closes, and that pipe's write end is held in lifelines for the life of the process. what
// names the server in errors.
func startServer(what, script, announce string, env ...string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	// npm installs with this machine's environment (its proxy, its certificates): it is not
	// the product, and a user installs the same way.
	install := exec.Command(filepath.Join(root, "scripts", "local-sqs"), "--install")
	install.Dir = root
	if out, err := install.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install %s: %w\n%s", what, err, out)
	}
	cmd := exec.Command("node", filepath.Join(root, "internal", "testing", "testenv", script))
	cmd.Dir = root
	// Node needs only PATH; the server writes nothing to its home.
	cmd.Env = UserEnv("/nonexistent", env...)
	cmd.Stderr = os.Stderr
	// The server exits when this pipe closes, that is when the test binary exits, however
	// it exits. The write end is deliberately kept open for the life of the process.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", what, err)
	}
	lifelinesMu.Lock()
	lifelines = append(lifelines, stdin)
	lifelinesMu.Unlock()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line, ok := <-lines:
		port, found := strings.CutPrefix(line, announce)
		if !ok || !found {
			_ = cmd.Process.Kill()
			return "", fmt.Errorf("%s said %q instead of its port", what, line)
		}
		if _, err := strconv.Atoi(port); err != nil {
			_ = cmd.Process.Kill()
			return "", fmt.Errorf("%s port %q: %w", what, port, err)
		}
		return port, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return "", fmt.Errorf("%s did not report its port within 30s", what)
	}
}

// Client returns a real SQS client that sends every request to the emulator.
func (e *Emulator) Client() *sqs.Client { return ClientFor(e.Endpoint) }

// Env returns environment variables that point the watchbot binary at the emulator, for SQS
// and for S3 (fauxqs serves both on one port).
func (e *Emulator) Env() []string {
	return append(credentialsEnv(), "AWS_ENDPOINT_URL_SQS="+e.Endpoint, "AWS_ENDPOINT_URL_S3="+e.Endpoint)
}

// credentialsEnv is the test credentials and Region as environment variables, with the
// instance metadata lookup off.
func credentialsEnv() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=test",
		"AWS_SECRET_ACCESS_KEY=test",
		"AWS_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// ShortPoll gives a listen a 2 s long poll, so that stopping an idle one takes at most 2 s,
// not the default 20; Watchbot sets it. A test about the default long poll passes
// --wait-time 20s, which the flag's precedence over the environment keeps.
const ShortPoll = "WATCHBOT_WAIT_TIME=2s"

// Watchbot returns the command that runs the watchbot binary with args in a user's
// environment (CleanEnv) pointing at the emulator, with ShortPoll; add what the test names to
// cmd.Env. Start it with Spawn, after setting its output.
func (e *Emulator) Watchbot(tb testing.TB, args ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(Binary(tb), args...)
	cmd.Env = CleanEnv(tb, append(e.Env(), ShortPoll)...)
	return cmd
}

// Queue is a work queue created for one test, with its dead-letter queue.
type Queue struct {
	URL, ARN       string
	DLQURL, DLQARN string
	Name           string
}

// QueueOptions shape NewQueue's queues.
type QueueOptions struct {
	// MaxReceiveCount of the redrive policy; 0 means no DLQ and no redrive policy.
	MaxReceiveCount int
	// VisibilityTimeout of the work queue; 0 means 30 s.
	VisibilityTimeout time.Duration
	// FIFO creates .fifo queues with content-based deduplication.
	FIFO bool
	// Attributes are further attributes of the queue and its DLQ, such as MaximumMessageSize.
	Attributes map[string]string
}

var queueSeq atomic.Int64

// NewQueue creates a uniquely named queue (and DLQ with a redrive policy when
// MaxReceiveCount > 0) for this test.
func (e *Emulator) NewQueue(tb testing.TB, o QueueOptions) Queue {
	tb.Helper()
	name := sanitize(tb.Name()) + "-" + strconv.FormatInt(queueSeq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	q, err := CreateQueue(context.Background(), e.Client(), name, o)
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// sanitize turns a test name into a legal queue-name prefix (alphanumerics, - and _, ≤ 50).
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	if len(b) > 50 {
		b = b[len(b)-50:]
	}
	return string(b)
}

// Binary builds ./cmd/watchbot once per test binary and returns its path.
func Binary(tb testing.TB) string {
	tb.Helper()
	return Build(tb, "./cmd/watchbot")
}

// build is one package built by Build.
type build struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // package path → *build

// Build builds the main package pkg (a path from the repository root, such as
// "./cmd/watchbot") once per test binary and returns the executable's path.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		root, err := Root()
		if err != nil {
			b.err = err
			return
		}
		dir, err := os.MkdirTemp("", "watchbot-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		// The Go toolchain builds with this machine's environment (its caches, GOFLAGS, proxy);
		// what the tests then run gets a user's (CleanEnv).
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatalf("build %s: %v", pkg, b.err)
	}
	return b.path
}

// Soak reports whether the long forms of tests run: WATCHBOT_SOAK is set (to the soak's
// length, by scripts/soak). Without it a real-time test longer than 20 s skips, or runs in
// a shorter form, and its long form waits for `make soak`.
func Soak() bool { return os.Getenv("WATCHBOT_SOAK") != "" }
