package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/payload"
)

// startWithS3 runs the supervisor with s3 as its payload client.
func (h *harness) startWithS3(cfg Config, s3c PayloadAPI) (stop func() error) {
	h.t.Helper()
	return testenv.Run(h.t, "supervisor", 60*time.Second, func(ctx context.Context) error {
		log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: h.level}))
		return Run(ctx, cfg, Deps{SQS: h.c, Logger: log, Metrics: h.metrics, S3: s3c})
	}, h.logs.String)
}

// runUntilEmpty runs the supervisor with s3c until the queue is empty, within limit.
func (h *harness) runUntilEmpty(cfg Config, s3c PayloadAPI, limit time.Duration) {
	h.t.Helper()
	stop := h.startWithS3(cfg, s3c)
	h.eventually("every message done", limit, func() bool { return h.empty(h.q.URL) })
	if err := stop(); err != nil {
		h.t.Fatal(err)
	}
}

// sendRaw sends body and attrs exactly as given (a pointer message as a library sends it).
func (h *harness) sendRaw(body string, attrs map[string]types.MessageAttributeValue) string {
	h.t.Helper()
	out, err := h.c.SendMessage(h.t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(h.q.URL), MessageBody: aws.String(body), MessageAttributes: attrs})
	if err != nil {
		h.t.Fatalf("send: %v", err)
	}
	return aws.ToString(out.MessageId)
}

// pointerTo is a pointer message's body and attributes for an object of size bytes, as the
// Java library writes them.
func pointerTo(p payload.Pointer, size int) (string, map[string]types.MessageAttributeValue) {
	return p.Encode(), map[string]types.MessageAttributeValue{
		payload.SizeAttribute: {DataType: aws.String(payload.SizeAttributeType), StringValue: aws.String(payload.SizeValue(int64(size)))}}
}

// payloadBody is size bytes of text that tells its objects apart.
func payloadBody(tag string, size int) []byte {
	b := bytes.Repeat([]byte(tag+" é\"\\\n"), size/len(tag)+1)
	return b[:size]
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// payloadWorker records, per message, the digests of stdin and of the message file, the
// payload variable and the Message variable's digest (or "unset").
func (h *harness) payloadWorker() string {
	return h.script("worker.sh", `out="`+h.dir+`/$MessageId"
stdin=$(sha256sum | cut -d' ' -f1)
file=$(sha256sum < "$WATCHBOT_MESSAGE_FILE" | cut -d' ' -f1)
if [ "${Message+set}" = set ]; then msg=$(printf %s "$Message" | sha256sum | cut -d' ' -f1); else msg=unset; fi
printf '%s %s %s %s\n' "$stdin" "$file" "$msg" "${WATCHBOT_PAYLOAD_S3_URI:-none}" > "$out.tmp" && mv "$out.tmp" "$out"
`)
}

func (h *harness) record(id string) (stdin, file, msg, uri string, ok bool) {
	b, err := os.ReadFile(filepath.Join(h.dir, id))
	if err != nil {
		return "", "", "", "", false
	}
	f := strings.Fields(string(b))
	return f[0], f[1], f[2], f[3], len(f) == 4
}

// TestPayloadFixtures: a pointer message exactly as each Extended Client library sends it runs
// with the full body on stdin and in the message file; a small one in Message too; each
// object is deleted once its message succeeded.
func TestPayloadFixtures(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	s3c := h.emu.S3()
	testenv.CreateBucket(t, s3c, "extended-client-fixtures")
	small := h.emu.NewBucket(t)
	type sent struct {
		body []byte
		p    payload.Pointer
	}
	byID := map[string]sent{}
	for _, name := range []string{"java.json", "java-legacy-attribute.json", "python.json", "java-legacy.json", "python-legacy.json"} {
		f := testenv.ReadPayloadFixture(t, name)
		p, err := payload.Parse(f.Body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body := payloadBody(name, 262145) // the fixtures' ExtendedPayloadSize
		testenv.PutObject(t, s3c, p.Bucket, p.Key, body)
		byID[h.sendRaw(f.Body, f.Attributes)] = sent{body, p}
	}
	sp := payload.Pointer{Bucket: small, Key: payload.NewKey()}
	smallBody := payloadBody("small", 1000)
	testenv.PutObject(t, s3c, sp.Bucket, sp.Key, smallBody)
	pb, pa := pointerTo(sp, len(smallBody))
	byID[h.sendRaw(pb, pa)] = sent{smallBody, sp}
	inline := h.send(`{"inline":true}`, nil)

	cfg := h.config(h.payloadWorker())
	cfg.Concurrency = 3
	cfg.Payload = PayloadConfig{Buckets: []string{"extended-client-fixtures", small}}
	h.runUntilEmpty(cfg, s3c, 30*time.Second)
	for id, s := range byID {
		stdin, file, msg, uri, ok := h.record(id)
		want := sha(s.body)
		if !ok || stdin != want || file != want || uri != s.p.URI() {
			t.Errorf("%s: worker saw stdin %s file %s uri %s; want %s and %s", s.p.Key, stdin, file, uri, want, s.p.URI())
		}
		// The Message variable holds a body of up to 64 KiB.
		if wantMsg := map[bool]string{true: want, false: "unset"}[len(s.body) <= 64*1024]; msg != wantMsg {
			t.Errorf("%s: Message %s, want %s", s.p.Key, msg, wantMsg)
		}
		if testenv.ObjectExists(t, s3c, s.p.Bucket, s.p.Key) {
			t.Errorf("%s: object still there after its message succeeded", s.p.URI())
		}
	}
	if _, _, msg, uri, _ := h.record(inline); uri != "none" || msg != sha([]byte(`{"inline":true}`)) {
		t.Errorf("inline message: Message %s, payload %s", msg, uri)
	}
	if got := h.metrics.get(alarms.MessagesProcessed); got != 7 {
		t.Errorf("MessagesProcessed = %v, want 7", got)
	}
}

// TestPayloadKeep: with --keep-payloads the object stays after success.
func TestPayloadKeep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	s3c := h.emu.S3()
	bucket := h.emu.NewBucket(t)
	p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
	body := payloadBody("keep", 5000)
	testenv.PutObject(t, s3c, bucket, p.Key, body)
	id := h.sendRaw(pointerTo(p, len(body)))
	cfg := h.config(h.payloadWorker())
	cfg.Payload = PayloadConfig{Buckets: []string{bucket}, Keep: true}
	h.runUntilEmpty(cfg, s3c, 30*time.Second)
	if stdin, _, _, _, _ := h.record(id); stdin != sha(body) {
		t.Errorf("worker saw %s", stdin)
	}
	if !testenv.ObjectExists(t, s3c, bucket, p.Key) {
		t.Error("object deleted despite --keep-payloads")
	}
}

// dlqReasons maps each dead-lettered message's original id to its dead-letter reason.
func (h *harness) dlqReasons(want int) map[string]dlqattr.Cause {
	h.t.Helper()
	got := map[string]dlqattr.Cause{}
	h.eventually("dead-letters", 20*time.Second, func() bool {
		for _, m := range h.receiveDLQ() {
			c, _ := dlqattr.Read(m.MessageAttributes)
			got[c.OriginalMessageID] = c
		}
		return len(got) >= want
	})
	return got
}

// TestPayloadRejected: a missing object, a pointer to a bucket not allowed and a pointer that
// does not parse while its size attribute is there are dead-lettered on their first attempt,
// with their reasons, and the worker never runs; the foreign bucket is never asked for
// anything (the request log of a proxy in front of S3). A look-alike without the attribute is
// an ordinary body.
func TestPayloadRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	proxy, proxyURL := faultproxy.Serve(t, h.emu.Endpoint, faultproxy.Config{})
	s3c := testenv.S3ClientFor(proxyURL)
	allowed := h.emu.NewBucket(t)
	foreign := h.emu.NewBucket(t)
	testenv.PutObject(t, h.emu.S3(), foreign, "secret", []byte("not yours"))

	missing := h.sendRaw(pointerTo(payload.Pointer{Bucket: allowed, Key: "gone"}, 10))
	notAllowed := h.sendRaw(pointerTo(payload.Pointer{Bucket: foreign, Key: "secret"}, 9))
	broken := h.sendRaw(`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"`+allowed+`"}]`,
		map[string]types.MessageAttributeValue{payload.LegacySizeAttribute: {DataType: aws.String("Number"), StringValue: aws.String("10")}})
	lookAlike := `["software.amazon.payloadoffloading.PayloadS3Pointer",{"note":"just JSON"}]`
	ordinary := h.send(lookAlike, nil)

	cfg := h.config(h.payloadWorker())
	cfg.Concurrency = 4
	cfg.Payload = PayloadConfig{Buckets: []string{allowed}}
	stop := h.startWithS3(cfg, s3c)
	reasons := h.dlqReasons(3)
	h.eventually("queue empty", 20*time.Second, func() bool { return h.empty(h.q.URL) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		missing:    "cannot be fetched: NoSuchKey",
		notAllowed: `payload bucket "` + foreign + `" is not allowed (--payload-bucket)`,
		broken:     "has SQSLargePayloadSize but its body is not a pointer",
	} {
		c := reasons[id]
		if !strings.Contains(c.Reason, want) || c.Attempts != 1 {
			t.Errorf("message %s: dead-lettered with %+v, want reason %q on attempt 1", id, c, want)
		}
		if _, _, _, _, ran := h.record(id); ran {
			t.Errorf("message %s: the worker ran", id)
		}
	}
	if _, _, msg, uri, _ := h.record(ordinary); uri != "none" || msg != sha([]byte(lookAlike)) {
		t.Errorf("look-alike without the attribute: Message %s, payload %s", msg, uri)
	}
	for op, s := range proxy.Stats().Operations {
		if op != faultproxy.S3GetObject && s.Requests > 0 {
			t.Errorf("S3 saw %d %s requests", s.Requests, op)
		}
	}
	if got := proxy.Stats().Operations[faultproxy.S3GetObject].Requests; got != 1 {
		t.Errorf("S3 saw %d GetObject requests, want the missing object's alone", got)
	}
	if !testenv.ObjectExists(t, h.emu.S3(), foreign, "secret") {
		t.Error("the foreign object was deleted")
	}
	if got := h.metrics.get(alarms.WorkerErrors); got != 0 {
		t.Errorf("WorkerErrors = %v, want none", got)
	}
}

// TestPayloadBatchMixed: a batch of inline and pointer bodies gives the worker every body
// whole, the payloads' with their objects named.
func TestPayloadBatchMixed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	s3c := h.emu.S3()
	bucket := h.emu.NewBucket(t)
	want := map[string]string{} // id -> body
	uris := map[string]string{}
	for i, size := range []int{100, 300000, 70000} {
		p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
		body := payloadBody("batch"+string(rune('a'+i))+"\u2028\x01", size)
		testenv.PutObject(t, s3c, bucket, p.Key, body)
		id := h.sendRaw(pointerTo(p, size))
		want[id], uris[id] = string(body), p.URI()
		inline := `{"n":` + string(rune('0'+i)) + `}`
		want[h.send(inline, nil)] = inline
	}
	out := filepath.Join(h.dir, "batches")
	cfg := h.config(h.script("batch.sh", `cat >> "`+out+`"`))
	cfg.BatchSize, cfg.BatchWindow = 6, 2*time.Second
	cfg.Payload = PayloadConfig{Buckets: []string{bucket}}
	h.runUntilEmpty(cfg, s3c, 30*time.Second)
	got := readBatchLines(t, out)
	for id, body := range want {
		l, ok := got[id]
		if !ok || l.Body != body || l.PayloadS3URI != uris[id] {
			t.Errorf("message %s: line %v (body of %d bytes, payload %q), want %d bytes, payload %q", id, ok, len(l.Body), l.PayloadS3URI, len(body), uris[id])
		}
	}
}

type payloadLine struct {
	ID           string `json:"id"`
	Body         string `json:"body"`
	PayloadS3URI string `json:"payloadS3Uri"`
	Attempt      int    `json:"attempt"`
}

func readBatchLines(t *testing.T, path string) map[string]payloadLine {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]payloadLine{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for dec.More() {
		var l payloadLine
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("batch line: %v", err)
		}
		got[l.ID] = l
	}
	return got
}

// TestPayloadHTTPWorker: an HTTP worker gets the payload as the POST's body, one message or a
// batch.
func TestPayloadHTTPWorker(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "batch"}[batch], func(t *testing.T) {
			h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
			s3c := h.emu.S3()
			bucket := h.emu.NewBucket(t)
			p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
			body := payloadBody("http", 200000)
			testenv.PutObject(t, s3c, bucket, p.Key, body)
			id := h.sendRaw(pointerTo(p, len(body)))
			var mu sync.Mutex
			var posts [][]byte
			var headers []http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				posts, headers = append(posts, b), append(headers, r.Header.Clone())
				mu.Unlock()
			}))
			defer srv.Close()
			cfg := h.config()
			cfg.HTTP.URL = srv.URL
			if batch {
				cfg.BatchSize, cfg.BatchWindow = 2, time.Second
			}
			cfg.Payload = PayloadConfig{Buckets: []string{bucket}}
			h.runUntilEmpty(cfg, s3c, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if len(posts) != 1 {
				t.Fatalf("%d POSTs", len(posts))
			}
			if !batch {
				if !bytes.Equal(posts[0], body) || headers[0].Get("X-Watchbot-Payload-S3-Uri") != p.URI() {
					t.Errorf("POST of %d bytes, header %q; want the payload's %d bytes", len(posts[0]), headers[0].Get("X-Watchbot-Payload-S3-Uri"), len(body))
				}
				return
			}
			var lines []payloadLine
			if err := json.Unmarshal(posts[0], &lines); err != nil || len(lines) != 1 || lines[0].ID != id || lines[0].Body != string(body) || lines[0].PayloadS3URI != p.URI() {
				t.Errorf("batch POST: %v, %d lines", err, len(lines))
			}
		})
	}
}

// TestPayloadS3Faults: S3 throttling and server errors on the fetches and the deletes lose no
// message: each runs with its whole body, none is dead-lettered, and a delete that failed
// leaves the message done and is counted.
func TestPayloadS3Faults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 10})
	proxy, proxyURL := faultproxy.Serve(t, h.emu.Endpoint, faultproxy.Config{Seed: 7, Rules: []faultproxy.Rule{
		{Operations: []string{faultproxy.S3GetObject, faultproxy.S3DeleteObject}, Fault: faultproxy.Throttle, Rate: 0.3},
		{Operations: []string{faultproxy.S3GetObject, faultproxy.S3DeleteObject}, Fault: faultproxy.ServerError, Rate: 0.3},
		{Operations: []string{faultproxy.S3GetObject}, Fault: faultproxy.DropBefore, Rate: 0.1},
	}})
	s3c := testenv.S3ClientFor(proxyURL)
	bucket := h.emu.NewBucket(t)
	bodies := map[string][]byte{}
	for i := range 12 {
		p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
		body := payloadBody("fault"+string(rune('a'+i)), 20000+i)
		testenv.PutObject(t, h.emu.S3(), bucket, p.Key, body)
		bodies[h.sendRaw(pointerTo(p, len(body)))] = body
	}
	cfg := h.config(h.payloadWorker())
	cfg.Concurrency = 4
	cfg.Payload = PayloadConfig{Buckets: []string{bucket}}
	h.runUntilEmpty(cfg, s3c, 60*time.Second)
	for id, body := range bodies {
		if stdin, _, _, _, _ := h.record(id); stdin != sha(body) {
			t.Errorf("message %s: worker saw %s, want %s", id, stdin, sha(body))
		}
	}
	if !h.empty(h.q.DLQURL) {
		t.Error("a message was dead-lettered")
	}
	if got := h.metrics.get(alarms.MessagesProcessed); got != 12 {
		t.Errorf("MessagesProcessed = %v, want 12", got)
	}
	if got := h.metrics.get(alarms.WorkerErrors); got != 0 {
		t.Errorf("WorkerErrors = %v: a payload fault is not the worker's", got)
	}
	injected := proxy.Stats().Operations[faultproxy.S3GetObject].Injected() + proxy.Stats().Operations[faultproxy.S3DeleteObject].Injected()
	if injected == 0 {
		t.Fatal("no fault injected")
	}
	left := 0
	out, err := h.emu.S3().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	left = len(out.Contents)
	if float64(left) > h.metrics.get(alarms.PayloadDeleteErrors) {
		t.Errorf("%d objects left, but %v deletes counted as failed", left, h.metrics.get(alarms.PayloadDeleteErrors))
	}
	t.Logf("faults injected %d; fetch errors %v; delete errors %v; objects left %d", injected,
		h.metrics.get(alarms.PayloadFetchErrors), h.metrics.get(alarms.PayloadDeleteErrors), left)
}

// TestPayloadPassThrough: without --payload-bucket a pointer reaches the worker untouched, as
// its sender wrote it, with one warning, and its object stays.
func TestPayloadPassThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bucket := h.emu.NewBucket(t)
	p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
	testenv.PutObject(t, h.emu.S3(), bucket, p.Key, []byte("the payload"))
	ids := []string{h.sendRaw(pointerTo(p, 11)), h.sendRaw(pointerTo(p, 11))}
	stop := h.start(h.config(h.payloadWorker()))
	h.eventually("messages done", 30*time.Second, func() bool { return h.empty(h.q.URL) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if stdin, _, msg, uri, _ := h.record(id); stdin != sha([]byte(p.Encode())) || msg != stdin || uri != "none" {
			t.Errorf("worker saw stdin %s, Message %s, payload %s; want the pointer itself", stdin, msg, uri)
		}
	}
	if n := testenv.LogCount(h.logs.String(), "level", "WARN", "payload", "*"); n != 1 {
		t.Errorf("%d warnings of a pointer passed through, want 1 (later ones at debug level)", n)
	}
	if !testenv.ObjectExists(t, h.emu.S3(), bucket, p.Key) {
		t.Error("the object was deleted without --payload-bucket")
	}
}

func TestCheckPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  PayloadConfig
		want string // "" when valid
	}{
		{PayloadConfig{}, ""},
		{PayloadConfig{Buckets: []string{"my-payloads", "a.b-c1"}}, ""},
		{PayloadConfig{Buckets: []string{"my-payloads"}, Keep: true}, ""},
		{PayloadConfig{Keep: true}, "needs"},
		{PayloadConfig{Buckets: []string{"s3://my-payloads"}}, "a bucket's name alone"},
		{PayloadConfig{Buckets: []string{"arn:aws:s3:::b"}}, "a bucket's name alone"},
		{PayloadConfig{Buckets: []string{"My_Bucket"}}, "is not a bucket name"},
		{PayloadConfig{Buckets: []string{"ab"}}, "is not a bucket name"},
		{PayloadConfig{Buckets: []string{"-ab"}}, "is not a bucket name"},
		{PayloadConfig{Buckets: []string{strings.Repeat("a", 64)}}, "is not a bucket name"},
	}
	for _, tt := range tests {
		err := CheckPayload(tt.cfg)
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckPayload(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestPayloadFetchStopped: a stop while a payload downloads ends the download within the
// stop's window, and the message is released for another task, unrun and not dead-lettered.
func TestPayloadFetchStopped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	proxy, proxyURL := faultproxy.Serve(t, h.emu.Endpoint, faultproxy.Config{Rules: []faultproxy.Rule{
		{Operations: []string{faultproxy.S3GetObject}, Fault: faultproxy.Stall, Rate: 1, Until: 10 * time.Minute},
	}})
	bucket := h.emu.NewBucket(t)
	p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
	testenv.PutObject(t, h.emu.S3(), bucket, p.Key, []byte("slow"))
	id := h.sendRaw(pointerTo(p, 4))
	cfg := h.config(h.payloadWorker())
	cfg.ShutdownTimeout, cfg.KillGrace = time.Second, time.Second
	cfg.Payload = PayloadConfig{Buckets: []string{bucket}}
	stop := h.startWithS3(cfg, testenv.S3ClientFor(proxyURL))
	h.eventually("the download under way", 20*time.Second, func() bool {
		return proxy.Stats().Operations[faultproxy.S3GetObject].Requests > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	h.eventually("the message visible again", 10*time.Second, func() bool {
		return testenv.Depth(t, h.c, h.q.URL).Visible == 1
	})
	if _, _, _, _, ran := h.record(id); ran {
		t.Error("the worker ran")
	}
	if !h.empty(h.q.DLQURL) {
		t.Error("the message was dead-lettered")
	}
	if !testenv.Logged(h.logs.String(), "outcome", "release", "visible_in_seconds", "0") {
		t.Errorf("the release does not say why; logs:\n%s", h.logs.String())
	}
}
