// Package testenv gives integration tests a real SQS endpoint: the pinned fauxqs emulator,
// started once per test binary on a free port on 127.0.0.1, and reached through the real AWS
// SDK over HTTP. It also builds the watchbot binary for tests that run it as a user would.
//
// When the emulator cannot start, tests are skipped on a developer's machine and fail under
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
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
	// lifeline is the write end of the emulator's stdin. It must stay reachable: if it were
	// garbage-collected its finalizer would close it and the emulator would exit.
	lifeline io.WriteCloser
)

// SQS returns the shared emulator, starting it on first use. It fails the test under CI=true
// and skips it elsewhere when the emulator cannot start.
func SQS(tb testing.TB) *Emulator {
	tb.Helper()
	startOnce.Do(func() { shared, startErr = Start() })
	if startErr != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("SQS emulator did not start (required under CI=true): %v", startErr)
		}
		tb.Skipf("SQS emulator did not start: %v", startErr)
	}
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
	root, err := Root()
	if err != nil {
		return nil, err
	}
	install := exec.Command(filepath.Join(root, "scripts", "local-sqs"), "--install")
	install.Dir = root
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("install emulator: %w\n%s", err, out)
	}
	cmd := exec.Command("node", filepath.Join(root, "internal", "testing", "testenv", "fauxqs-server.mjs"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FAUXQS_PORT=0", "FAUXQS_EXIT_ON_STDIN_CLOSE=1")
	cmd.Stderr = os.Stderr
	// The emulator exits when this pipe closes, that is when the test binary exits, however
	// it exits. The write end is deliberately kept open for the life of the process.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	lifeline = stdin
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
		port, found := strings.CutPrefix(line, "fauxqs listening on port ")
		if !ok || !found {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("emulator said %q instead of its port", line)
		}
		if _, err := strconv.Atoi(port); err != nil {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("emulator port %q: %w", port, err)
		}
		return &Emulator{Endpoint: "http://127.0.0.1:" + port}, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("emulator did not report its port within 30s")
	}
}

// Config returns SDK configuration for the emulator: fixed test credentials and region.
func (e *Emulator) Config() aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
}

// Client returns a real SQS client that sends every request to the emulator.
func (e *Emulator) Client() *sqs.Client {
	return sqs.NewFromConfig(e.Config(), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(e.Endpoint)
	})
}

// Env returns environment variables that point the watchbot binary at the emulator.
func (e *Emulator) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=test",
		"AWS_SECRET_ACCESS_KEY=test",
		"AWS_REGION=" + Region,
		"AWS_ENDPOINT_URL_SQS=" + e.Endpoint,
		"AWS_EC2_METADATA_DISABLED=true",
	}
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
}

var queueSeq atomic.Int64

// NewQueue creates a uniquely named queue (and DLQ with a redrive policy when
// MaxReceiveCount > 0) for this test.
func (e *Emulator) NewQueue(tb testing.TB, o QueueOptions) Queue {
	tb.Helper()
	ctx := context.Background()
	c := e.Client()
	name := sanitize(tb.Name()) + "-" + strconv.FormatInt(queueSeq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	suffix := ""
	if o.FIFO {
		suffix = ".fifo"
	}
	q := Queue{Name: name + suffix}
	attrs := map[string]string{}
	if o.FIFO {
		attrs["FifoQueue"] = "true"
		attrs["ContentBasedDeduplication"] = "true"
	}
	vis := o.VisibilityTimeout
	if vis == 0 {
		vis = 30 * time.Second
	}
	if o.MaxReceiveCount > 0 {
		q.DLQURL, q.DLQARN = e.createQueue(tb, ctx, c, name+"-dlq"+suffix, copyAttrs(attrs))
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, q.DLQARN, o.MaxReceiveCount)
	}
	attrs["VisibilityTimeout"] = strconv.Itoa(int(vis / time.Second))
	q.URL, q.ARN = e.createQueue(tb, ctx, c, q.Name, attrs)
	return q
}

func (e *Emulator) createQueue(tb testing.TB, ctx context.Context, c *sqs.Client, name string, attrs map[string]string) (string, string) {
	tb.Helper()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		tb.Fatalf("create queue %s: %v", name, err)
	}
	got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		tb.Fatalf("read queue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl), got.Attributes["QueueArn"]
}

func copyAttrs(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
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

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds ./cmd/watchbot once per test binary and returns its path.
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		root, err := Root()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "watchbot-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "watchbot")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/watchbot")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatalf("build watchbot: %v", buildErr)
	}
	return buildPath
}
