package reqbody

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"
)

// slowConn stands for a loaded machine, deterministically: after each write the writing
// goroutine (the Transport's writeLoop) stalls, so the server's answer arrives and the SDK
// closes the request body before the Transport's last check of that body; and the answer
// trickles in, so the caller is still reading it when that check runs. It records its writes.
type slowConn struct {
	net.Conn
	writeStall time.Duration
	readChunk  int
	readPause  time.Duration
	writes     func(p []byte)
}

func (c *slowConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.writes(p)
	time.Sleep(c.writeStall)
	return n, err
}

func (c *slowConn) Read(p []byte) (int, error) {
	time.Sleep(c.readPause)
	return c.Conn.Read(p[:min(len(p), c.readChunk)])
}

// fakeSQS answers every ReceiveMessage with ten messages of about 2 KiB each and counts the
// receives it answered.
func fakeSQS(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var answered atomic.Int64
	var msgs []map[string]string
	for i := range 10 {
		body := fmt.Sprintf("%d:%s", i, strings.Repeat("x", 2048))
		sum := md5.Sum([]byte(body))
		msgs = append(msgs, map[string]string{
			"MessageId": fmt.Sprintf("m%d", i), "ReceiptHandle": fmt.Sprintf("r%d", i),
			"Body": body, "MD5OfBody": hex.EncodeToString(sum[:]),
		})
	}
	answer, err := json.Marshal(map[string]any{"Messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		answered.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv, &answered
}

type result struct {
	messages  int
	err       error
	answered  int64    // receives the server answered, attempts included
	warnings  []string // what the SDK logged at WARN
	writeErrs []error  // request writes the Transport reported as failed
	writes    []string // what went on the connection, a write at a time
	queueURL  string
}

// receive makes one ReceiveMessage call through a client built as awsenv builds one (the SDK's
// default HTTP client, standard retryer), over slowConn, with or without HTTPClient.
func receive(t *testing.T, guarded bool) result {
	t.Helper()
	srv, answered := fakeSQS(t)
	var mu sync.Mutex
	var res result
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowConn{Conn: c, writeStall: 100 * time.Millisecond, readChunk: 256, readPause: 5 * time.Millisecond,
				writes: func(p []byte) {
					mu.Lock()
					res.writes = append(res.writes, string(p))
					mu.Unlock()
				}}, nil
		}
	})
	var hc aws.HTTPClient = httpClient
	if guarded {
		hc = HTTPClient(httpClient)
	}
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  hc,
		Logger: logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
			if c == logging.Warn {
				mu.Lock()
				res.warnings = append(res.warnings, fmt.Sprintf(format, v...))
				mu.Unlock()
			}
		}),
	}
	c := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	ctx := contextWithWriteErrors(t.Context(), func(err error) {
		mu.Lock()
		res.writeErrs = append(res.writeErrs, err)
		mu.Unlock()
	})
	res.queueURL = srv.URL + "/000000000000/q"
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(res.queueURL), MaxNumberOfMessages: 10})
	res.err = err
	if out != nil {
		res.messages = len(out.Messages)
	}
	// The Transport's writer may report after Do returned; give it the time its stall takes.
	time.Sleep(200 * time.Millisecond)
	res.answered = answered.Load()
	return res
}

func TestReceiveAnswerSurvivesALateRequestWriter(t *testing.T) {
	res := receive(t, true)
	if res.err != nil || res.messages != 10 {
		t.Fatalf("receive = %d messages, %v; want the 10 the server sent", res.messages, res.err)
	}
	if res.answered != 1 {
		t.Errorf("the server answered %d receives for one call: an answer was lost and the call retried", res.answered)
	}
	if len(res.writeErrs) != 0 || len(res.warnings) != 0 {
		t.Errorf("request write errors %v, SDK warnings %q; want none", res.writeErrs, res.warnings)
	}
	// One call, one write: the headers and the body together.
	if len(res.writes) != 1 || !strings.HasPrefix(res.writes[0], "POST ") || !strings.HasSuffix(res.writes[0], `"MaxNumberOfMessages":10,"QueueUrl":"`+res.queueURL+`"}`) {
		t.Errorf("the request went out in %d writes, want one holding headers and body: %q", len(res.writes), res.writes)
	}
}

// TestWithoutGuardTheSDKCutsTheConnection shows the failure HTTPClient prevents, with the SDK
// and Go versions in go.mod, and the two writes per request it saves. If it starts failing, the
// SDK no longer breaks the connection this way (check smithy-go's ClientHandler and
// safeWriteToReadCloser) and the guard's first reason is gone.
func TestWithoutGuardTheSDKCutsTheConnection(t *testing.T) {
	res := receive(t, false)
	if len(res.writeErrs) == 0 || res.answered < 2 {
		t.Fatalf("without the guard: %d messages, err %v, %d answers, write errors %v, warnings %q; "+
			"want the Transport to report a failed write and the SDK to retry an answered receive",
			res.messages, res.err, res.answered, res.writeErrs, res.warnings)
	}
	if len(res.writes) < 2 || !strings.HasPrefix(res.writes[0], "POST ") || strings.Contains(res.writes[0], "MaxNumberOfMessages") {
		t.Errorf("without the guard the headers should go out in a write of their own: %q", res.writes)
	}
	t.Logf("without the guard: %d answers for one call (%d messages kept), write errors %v, warnings %q",
		res.answered, res.messages, res.writeErrs, res.warnings)
}

// contextWithWriteErrors reports every request write the Transport counts as failed.
func contextWithWriteErrors(ctx context.Context, report func(error)) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err != nil {
				report(i.Err)
			}
		},
	})
}

// TestNilClientIsTheSDKDefault runs a real SQS call through HTTPClient(nil), as
// config.LoadDefaultConfig leaves it on a machine without AWS_CA_BUNDLE: the SDK's default
// client carries the request, nothing panics.
func TestNilClientIsTheSDKDefault(t *testing.T) {
	srv, answered := fakeSQS(t)
	defer srv.Close()
	c := sqs.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  HTTPClient(nil),
	}, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(srv.URL + "/000000000000/q")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 10 || answered.Load() != 1 {
		t.Fatalf("got %d messages in %d receives, want 10 in 1", len(out.Messages), answered.Load())
	}
}
