package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/payload"
)

// TestSendOffloads runs send against the emulator's SQS and S3: what goes through S3, in which
// format, and what stays inline.
func TestSendOffloads(t *testing.T) {
	emu := operatorEnv(t)
	q := emu.NewQueue(t, testenv.QueueOptions{Attributes: map[string]string{"MaximumMessageSize": "1024"}})
	bucket := emu.NewBucket(t)
	big := bytes.Repeat([]byte("large body "), 200_000) // 2.2 MB: more than SQS ever takes
	file := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(file, big, 0o600); err != nil {
		t.Fatal(err)
	}
	longLine := strings.Repeat("L", 1<<20+100)
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  []string // the bodies, in order; each over 1024 bytes or with --always-offload is a pointer
		ptr   []bool
	}{
		{"a file larger than SQS takes", "", []string{"--file", file}, []string{string(big)}, []bool{true}},
		{"stdin as one body", string(big), []string{"--file", "-"}, []string{string(big)}, []bool{true}},
		{"a small body stays inline", "", []string{"--body", "small"}, []string{"small"}, []bool{false}},
		{"small stdin as one body, newlines kept", "line 1\nline 2\n", []string{"--file", "-"}, []string{"line 1\nline 2\n"}, []bool{false}},
		{"always offload", "", []string{"--body", "tiny", "--always-offload"}, []string{"tiny"}, []bool{true}},
		{"lines, one longer than SQS takes", "a\n" + longLine + "\r\n" + strings.Repeat("m", 1500) + "\nb\n", nil,
			[]string{"a", longLine, strings.Repeat("m", 1500), "b"}, []bool{false, true, true, false}},
		{"threshold", "", []string{"--body", strings.Repeat("t", 101), "--payload-threshold", "100"}, []string{strings.Repeat("t", 101)}, []bool{true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"send", "--queue-url", q.URL, "--payload-bucket", bucket}, tt.args...)
			code, stdout, stderr := runCLI(t, strings.NewReader(tt.stdin), args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			ids := strings.Fields(stdout)
			if len(ids) != len(tt.want) {
				t.Fatalf("printed %d ids, want %d", len(ids), len(tt.want))
			}
			got := map[string]types.Message{}
			for _, m := range testenv.Drain(t, emu.Client(), q.URL, 10*time.Second) {
				got[aws.ToString(m.MessageId)] = m
			}
			for i, id := range ids {
				m, ok := got[id]
				if !ok {
					t.Fatalf("message %s not in the queue", id)
				}
				body := aws.ToString(m.Body)
				p, err := payload.Parse(body)
				if (err == nil) != tt.ptr[i] {
					t.Fatalf("message %d: pointer %v, want %v (%.60q)", i, err == nil, tt.ptr[i], body)
				}
				if !tt.ptr[i] {
					if body != tt.want[i] {
						t.Errorf("message %d: %q, want %q", i, body, tt.want[i])
					}
					continue
				}
				size := m.MessageAttributes[payload.SizeAttribute]
				if aws.ToString(size.DataType) != "Number" || aws.ToString(size.StringValue) != payload.SizeValue(int64(len(tt.want[i]))) {
					t.Errorf("message %d: %s = %s %s, want Number %d", i, payload.SizeAttribute, aws.ToString(size.DataType), aws.ToString(size.StringValue), len(tt.want[i]))
				}
				if p.Bucket != bucket || body != (payload.Pointer{Bucket: bucket, Key: p.Key}).Encode() {
					t.Errorf("message %d: pointer %s", i, body)
				}
				if obj := testenv.GetObject(t, emu.S3(), bucket, p.Key); string(obj) != tt.want[i] {
					t.Errorf("message %d: object of %d bytes, want %d", i, len(obj), len(tt.want[i]))
				}
			}
		})
	}
}

func TestSendOffloadBadInput(t *testing.T) {
	emu := operatorEnv(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	bucket := emu.NewBucket(t)
	file := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(file, bytes.Repeat([]byte("x"), 1<<20+1), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		env   map[string]string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"threshold without a bucket", nil, "", []string{"--body", "x", "--payload-threshold", "10"}, 2, "--payload-threshold needs --payload-bucket"},
		{"always without a bucket", nil, "", []string{"--body", "x", "--always-offload"}, 2, "--always-offload needs --payload-bucket"},
		{"a large file without a bucket", nil, "", []string{"--file", file}, 2, "is 1048577 bytes, more than 1 MiB, the most SQS takes: send it through S3 with --payload-bucket"},
		{"large stdin without a bucket", nil, strings.Repeat("y", 1<<20+1), []string{"--file", "-"}, 2, "--file -: stdin is longer than 1 MiB"},
		{"a long line without a bucket", nil, strings.Repeat("y", 1<<20+1), nil, 2, "stdin line 1: message is 1048577 bytes (body and attributes), more than the queue's MaximumMessageSize of 1048576: send it through S3 with --payload-bucket"},
		{"threshold 0", nil, "", []string{"--body", "x", "--payload-bucket", bucket, "--payload-threshold", "0"}, 2, "--payload-threshold (0) must be at least 1 byte"},
		{"threshold over SQS's", nil, "", []string{"--body", "x", "--payload-bucket", bucket, "--payload-threshold", "2000000"}, 2, "--payload-threshold (2000000) must be between 1 and 1048576"},
		{"reserved attribute", nil, "", []string{"--body", "x", "--payload-bucket", bucket, "--attr", "ExtendedPayloadSize:Number=3"}, 2, `--attr ("ExtendedPayloadSize") is reserved with --payload-bucket`},
		{"missing bucket", nil, "", []string{"--file", file, "--payload-bucket", "no-such-bucket-for-send"}, 1, "--file " + file + ": not sent: store the body in s3://no-such-bucket-for-send/"},
		{"S3 unreachable", map[string]string{"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:1", "AWS_MAX_ATTEMPTS": "1"}, "", []string{"--file", file, "--payload-bucket", bucket}, 1, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, stdout, stderr := runCLI(t, strings.NewReader(tt.stdin), append([]string{"send", "--queue-url", q.URL}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d with %q", code, stderr, tt.code, tt.want)
			}
			if stdout != "" {
				t.Errorf("printed %q", stdout)
			}
			if got := testenv.Drain(t, emu.Client(), q.URL, 10*time.Second); len(got) != 0 {
				t.Errorf("%d messages sent", len(got))
			}
		})
	}
}

// pointerLetters puts three messages in q's DLQ: a pointer to an object holding body (in the
// Java library's format), a pointer to a missing object (in the Python library's), and an
// ordinary message. It returns their keys.
func pointerLetters(t *testing.T, emu *testenv.Emulator, q testenv.Queue, bucket string, body []byte) (present, missing string) {
	t.Helper()
	present, missing = "present-"+bucket, "missing-"+bucket
	testenv.PutObject(t, emu.S3(), bucket, present, body)
	java := testenv.ReadPayloadFixture(t, "java.json")
	python := testenv.ReadPayloadFixture(t, "python.json")
	javaAttrs := map[string]types.MessageAttributeValue{"kind": {DataType: aws.String("String"), StringValue: aws.String("doc")}}
	for n, v := range java.Attributes {
		v.StringValue = aws.String(payload.SizeValue(int64(len(body))))
		javaAttrs[n] = v
	}
	retarget := func(f testenv.PayloadFixture, key string) string {
		p, err := payload.Parse(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Replace(strings.Replace(f.Body, p.Bucket, bucket, 1), p.Key, key, 1)
	}
	testenv.DeadLetter(t, emu.Client(), q,
		testenv.Letter{Body: retarget(java, present), Attributes: javaAttrs},
		testenv.Letter{Body: retarget(python, missing), Attributes: python.Attributes},
		testenv.Letter{Body: "plain body"},
	)
	return present, missing
}

// TestDeadLetterPayloads: peek and export show the pointer, --resolve-payloads fetches the body
// with the operator's credentials, and a missing object is reported per message; status counts
// the pointer messages in a sample of the DLQ.
func TestDeadLetterPayloads(t *testing.T) {
	emu := operatorEnv(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bucket := emu.NewBucket(t)
	body := bytes.Repeat([]byte(`{"page":"ünïcødé"}`), 100_000) // 2 MB
	present, missing := pointerLetters(t, emu, q, bucket, body)
	records := func(t *testing.T, jsonl string) map[string]deadletter.Record {
		t.Helper()
		out := map[string]deadletter.Record{}
		for _, line := range strings.Split(strings.TrimSpace(jsonl), "\n") {
			var r deadletter.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%v: %.100s", err, line)
			}
			key := "plain"
			if r.Payload != nil {
				key = r.Payload.Key
			}
			out[key] = r
		}
		if len(out) != 3 {
			t.Fatalf("%d records, want 3", len(out))
		}
		return out
	}

	t.Run("peek shows the pointer", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "peek")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{
			fmt.Sprintf("payload:  s3://%s/%s, %d bytes (ExtendedPayloadSize)", bucket, present, len(body)),
			fmt.Sprintf("payload:  s3://%s/%s, 262145 bytes (ExtendedPayloadSize)", bucket, missing),
			"the body below is the pointer: --resolve-payloads fetches the object",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("peek does not show %q:\n%s", want, stdout)
			}
		}
		code, stdout, _ = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "peek", "--json")
		recs := records(t, stdout)
		if p := recs[present].Payload; code != 0 || p.Bucket != bucket || p.Size == nil || *p.Size != int64(len(body)) || p.Resolved || !strings.HasPrefix(recs[present].Body, "[") {
			t.Errorf("peek --json: exit %d, %+v", code, p)
		}
	})
	t.Run("peek resolves", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "peek", "--json", "--resolve-payloads")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		recs := records(t, stdout)
		got := recs[present]
		if got.Body != string(body) || !got.Payload.Resolved {
			t.Errorf("resolved body: %d bytes, %+v", len(got.Body), got.Payload)
		}
		if _, ok := got.MessageAttributes[payload.SizeAttribute]; ok || got.MessageAttributes["kind"].StringValue == nil {
			t.Errorf("a resolved record keeps %s or loses its own attributes: %v", payload.SizeAttribute, got.MessageAttributes)
		}
		miss := recs[missing]
		if miss.Payload.Resolved || !strings.Contains(miss.Payload.Error, "NoSuchKey") || !strings.HasPrefix(miss.Body, "[") {
			t.Errorf("missing object: %+v", miss.Payload)
		}
		if !strings.Contains(stderr, "body not fetched from s3://"+bucket+"/"+missing+": NoSuchKey") {
			t.Errorf("stderr %q does not report the missing object", stderr)
		}
		code, stdout, _ = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "peek", "--resolve-payloads")
		if code != 0 || !strings.Contains(stdout, fmt.Sprintf("the body below is the object's content, fetched from S3 (%d bytes)", len(body))) ||
			!strings.Contains(stdout, `body:     {"page":"ünïcødé"}`) || !strings.Contains(stdout, "not fetched: NoSuchKey") {
			t.Errorf("peek --resolve-payloads: exit %d\n%s", code, stdout)
		}
	})
	t.Run("status counts pointers", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, nil, "status", "--queue-url", q.URL, "--sample-dlq", "10", "--json")
		var s deadletter.QueueStatus
		if code != 0 || json.Unmarshal([]byte(stdout), &s) != nil || s.DLQSample == nil {
			t.Fatalf("exit %d: %s %s", code, stdout, stderr)
		}
		if want := (deadletter.PayloadSample{Peeked: 3, Pointers: 2, Bytes: int64(len(body)) + 262145}); *s.DLQSample != want {
			t.Errorf("sample %+v, want %+v", *s.DLQSample, want)
		}
		code, stdout, _ = runCLI(t, nil, "status", "--queue-url", q.URL, "--sample-dlq", "10")
		if code != 0 || !strings.Contains(stdout, "dlq sample:  2 of 3 peeked point to bodies in S3") {
			t.Errorf("status: exit %d\n%s", code, stdout)
		}
		if code, _, stderr = runCLI(t, nil, "status", "--queue-url", q.URL, "--sample-dlq", "0"); code != 2 || !strings.Contains(stderr, "--sample-dlq (0) must be at least 1") {
			t.Errorf("--sample-dlq 0: exit %d, %s", code, stderr)
		}
	})
	t.Run("triage shows the pointer", func(t *testing.T) {
		code, out := runOnTerminal(t, "k\nk\nk\n", "dead-letter", "--queue-url", q.URL, "triage")
		if code != 0 {
			t.Fatalf("triage exit %d:\n%s", code, out)
		}
		for _, want := range []string{
			fmt.Sprintf("payload:  s3://%s/%s, %d bytes (ExtendedPayloadSize)", bucket, present, len(body)),
			fmt.Sprintf("payload:  s3://%s/%s, 262145 bytes (ExtendedPayloadSize)", bucket, missing),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("triage does not show %q:\n%s", want, out)
			}
		}
	})
	t.Run("export resolves, a missing object is not fatal", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "dlq.jsonl")
		code, stdout, stderr := runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "export", "--resolve-payloads", "--delete", file)
		if code != 1 || !strings.Contains(stderr, "export: 1 bodies could not be fetched from S3 (listed above): their lines keep the pointer, and their messages stay in the dead-letter queue") ||
			!strings.Contains(stderr, "watchbot: message ") || !strings.Contains(stderr, "NoSuchKey") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		if !strings.Contains(stdout, "exported 3 messages to "+file+", deleted 2 from") || !strings.Contains(stdout, "1 bodies fetched from S3") {
			t.Errorf("stdout %q", stdout)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		recs := records(t, string(data))
		if recs[present].Body != string(body) || recs["plain"].Body != "plain body" || !strings.Contains(recs[missing].Payload.Error, "NoSuchKey") {
			t.Errorf("export lines: %d-byte body, %q, %+v", len(recs[present].Body), recs["plain"].Body, recs[missing].Payload)
		}
		left := testenv.Drain(t, emu.Client(), q.DLQURL, 10*time.Second)
		if len(left) != 1 || !strings.Contains(aws.ToString(left[0].Body), missing) {
			t.Errorf("the DLQ holds %d messages, want the one whose body is missing", len(left))
		}
	})
	t.Run("bad input", func(t *testing.T) {
		t.Setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")
		t.Setenv("AWS_MAX_ATTEMPTS", "1")
		pointerLetters(t, emu, q, bucket, []byte("x"))
		code, _, stderr := runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "peek", "--resolve-payloads")
		if code != 0 || !strings.Contains(stderr, "body not fetched from s3://"+bucket+"/present-"+bucket) || !strings.Contains(stderr, "connection refused") {
			t.Errorf("S3 unreachable: exit %d, %s", code, stderr)
		}
	})
}

// hashingS3 stands in for S3's PutObject on 127.0.0.1: it reads each request's body through
// SHA-256 and keeps only the digest, so a body of any size can be sent to it (fauxqs takes
// requests of at most 11 MiB, S3 one PutObject of up to 5 GiB).
type hashingS3 struct {
	mu      sync.Mutex
	digests map[string]string // path to hex digest
	sizes   map[string]int64
}

func (h *hashingS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "only PutObject", http.StatusNotImplemented)
		return
	}
	d := sha256.New()
	n, err := io.Copy(d, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.digests[r.URL.Path], h.sizes[r.URL.Path] = hex.EncodeToString(d.Sum(nil)), n
	h.mu.Unlock()
	w.Header().Set("ETag", `"0"`)
}

// TestSendPayloadMemoryBound runs the built binary as a user does, `send --payload-bucket
// --file -` with a 200 MiB body on stdin: the object S3 receives is the body, the message
// points at it, and send's peak resident set (VmHWM) stays under 64 MiB: the body goes through
// a temporary file, and the upload streams from it.
func TestSendPayloadMemoryBound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("moves 200 MiB; make test runs it")
	}
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	s3 := &hashingS3{digests: map[string]string{}, sizes: map[string]int64{}}
	srv := httptest.NewServer(s3)
	defer srv.Close()

	digest := sha256.New()
	body := io.TeeReader(io.LimitReader(&randomBytes{rand.NewChaCha8([32]byte{9})}, payloadSize), digest)
	cmd := emu.Watchbot(t, "send", "--queue-url", q.URL, "--payload-bucket", "big-payloads", "--file", "-")
	cmd.Env = append(cmd.Env, "AWS_ENDPOINT_URL_S3="+srv.URL, "TMPDIR="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testenv.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	proc := testenv.Spawn(t, cmd)
	fed := make(chan error, 1)
	go func() {
		_, err := io.Copy(stdin, body)
		stdin.Close()
		fed <- err
	}()
	peak := peakRSS(proc)
	if err := <-fed; err != nil {
		t.Fatalf("feed stdin: %v", err)
	}
	if code := proc.Wait(t, 0); code != 0 {
		t.Fatalf("send exited %d: %s", code, stderr.String())
	}
	msgs := testenv.Drain(t, emu.Client(), q.URL, 10*time.Second)
	if len(msgs) != 1 || strings.TrimSpace(stdout.String()) != aws.ToString(msgs[0].MessageId) {
		t.Fatalf("%d messages; printed %q", len(msgs), stdout.String())
	}
	p, err := payload.Parse(aws.ToString(msgs[0].Body))
	if err != nil || p.Bucket != "big-payloads" {
		t.Fatalf("pointer %v, %v", p, err)
	}
	path := "/" + p.Bucket + "/" + p.Key
	if s3.sizes[path] != payloadSize || s3.digests[path] != hex.EncodeToString(digest.Sum(nil)) {
		t.Errorf("S3 received %d bytes with digest %s at %s, want the body's %d", s3.sizes[path], s3.digests[path], path, payloadSize)
	}
	if peak == 0 || peak >= memoryBound {
		t.Errorf("send's peak resident set was %d MiB, want below %d MiB", peak>>20, memoryBound>>20)
	}
	t.Logf("send: peak resident set %.1f MiB for a %d MiB body", float64(peak)/(1<<20), payloadSize>>20)
}

// TestSendThenListen: what send writes through S3, listen reads back whole for its worker,
// and deletes once the worker succeeded.
func TestSendThenListen(t *testing.T) {
	emu := operatorEnv(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bucket := emu.NewBucket(t)
	dir := t.TempDir()
	body := bytes.Repeat([]byte("ünïcødé payload\n"), 150_000) // 2.8 MB, with newlines: --file keeps them
	file := filepath.Join(dir, "body")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, nil, "send", "--queue-url", q.URL, "--payload-bucket", bucket, "--file", file)
	if code != 0 {
		t.Fatalf("send: exit %d: %s", code, stderr)
	}
	out := filepath.Join(dir, "got")
	cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--once", "--payload-bucket", bucket,
		"--", "/bin/sh", "-c", `cat > "`+out+`"; echo "$WATCHBOT_PAYLOAD_S3_URI" > "`+out+`.uri"`)
	var logs testenv.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, logs.String); code != 0 {
		t.Fatalf("listen: exit %d: %s", code, logs.String())
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, body) {
		t.Fatalf("the worker read %d bytes, want the %d send was given", len(got), len(body))
	}
	uri, _ := os.ReadFile(out + ".uri")
	p, err := payload.ParseURI(strings.TrimSpace(string(uri)))
	if err != nil || p.Bucket != bucket {
		t.Fatalf("WATCHBOT_PAYLOAD_S3_URI %q: %v", uri, err)
	}
	if testenv.ObjectExists(t, emu.S3(), bucket, p.Key) {
		t.Error("the object is still there after its message succeeded")
	}
	if strings.TrimSpace(stdout) == "" {
		t.Error("send printed no message id")
	}
}

// TestTryResolvesPayloads: try --payload-bucket fetches a pointer's body as listen does, with
// the caller's credentials, and keeps the object; a pointer to a bucket not allowed is the
// dead letter listen makes of it, S3 unasked; without the flag the pointer passes through.
func TestTryResolvesPayloads(t *testing.T) {
	emu := operatorEnv(t)
	bucket, foreign := emu.NewBucket(t), emu.NewBucket(t)
	body := bytes.Repeat([]byte("ünïcødé try payload\n"), 5000)
	p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
	testenv.PutObject(t, emu.S3(), bucket, p.Key, body)
	size := payload.SizeAttribute + "=" + payload.SizeValue(int64(len(body)))
	dir := t.TempDir()
	worker := []string{"--", "/bin/sh", "-c", `cat > "` + dir + `/stdin"; printf %s "$WATCHBOT_PAYLOAD_S3_URI" > "` + dir + `/uri"`}

	code, stdout, stderr := runCLI(t, nil, append([]string{"try", "--body", p.Encode(), "--attr", size, "--payload-bucket", bucket}, worker...)...)
	if code != 0 || !strings.HasPrefix(stdout, "delete") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "stdin")); !bytes.Equal(got, body) {
		t.Errorf("the worker read %d bytes, want the object's %d", len(got), len(body))
	}
	if uri, _ := os.ReadFile(filepath.Join(dir, "uri")); string(uri) != p.URI() {
		t.Errorf("WATCHBOT_PAYLOAD_S3_URI = %q, want %s", uri, p.URI())
	}
	if !testenv.ObjectExists(t, emu.S3(), bucket, p.Key) {
		t.Error("try deleted the object")
	}

	counter, endpoint := faultproxy.Serve(t, emu.Endpoint, faultproxy.Config{})
	t.Setenv("AWS_ENDPOINT_URL_S3", endpoint)
	elsewhere := payload.Pointer{Bucket: foreign, Key: p.Key}
	code, stdout, _ = runCLI(t, nil, append([]string{"try", "--body", elsewhere.Encode(), "--attr", size, "--payload-bucket", bucket}, worker...)...)
	if code != 13 || !strings.Contains(stdout, `payload bucket "`+foreign+`" is not allowed`) || !strings.Contains(stdout, "the S3 payload; the worker did not run") {
		t.Errorf("foreign bucket: exit %d: %s", code, stdout)
	}
	if n := len(counter.Stats().Operations); n != 0 {
		t.Errorf("S3 was asked %d kinds of request for a bucket not allowed", n)
	}

	code, _, stderr = runCLI(t, nil, append([]string{"try", "--log-format", "json", "--body", p.Encode(), "--attr", size}, worker...)...)
	if got, _ := os.ReadFile(filepath.Join(dir, "stdin")); code != 0 || string(got) != p.Encode() || !testenv.Logged(stderr, "level", "WARN", "payload", p.URI()) {
		t.Errorf("without --payload-bucket: exit %d, the worker read %.80q; %s", code, got, stderr)
	}
}
