package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/payload"
)

// payloadSize is the memory bound test's payload: 200 MiB.
const payloadSize = 200 << 20

// memoryBound is the most resident memory the built binary may use for it (docs/payloads.md).
const memoryBound = 64 << 20

// TestPayloadMemoryBound runs the built binary as a user does, `listen --once --payload-bucket`,
// on a pointer to a 200 MiB object: the worker reads all of it from stdin, and watchbot's peak
// resident set (VmHWM) stays under 64 MiB. The object reaches the emulator in parts, so that no
// one request holds it.
func TestPayloadMemoryBound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("moves 200 MiB through the emulator; make test runs it")
	}
	emu := testenv.SQS(t)
	c, s3c := emu.Client(), emu.S3()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bucket := emu.NewBucket(t)
	p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
	digest := sha256.New()
	src := io.TeeReader(io.LimitReader(&randomBytes{rand.NewChaCha8([32]byte{7})}, payloadSize), digest)
	testenv.PutLargeObject(t, s3c, bucket, p.Key, src, payloadSize, 8<<20) // fauxqs takes requests up to 11 MiB
	want := hex.EncodeToString(digest.Sum(nil))
	_, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(p.Encode()),
		MessageAttributes: map[string]types.MessageAttributeValue{payload.SizeAttribute: {
			DataType: aws.String(payload.SizeAttributeType), StringValue: aws.String(payload.SizeValue(payloadSize))}}})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	out := filepath.Join(dir, "digest")
	cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--once", "--payload-bucket", bucket, "--temp-dir", dir,
		"--", "/bin/sh", "-c", `sha256sum | cut -d' ' -f1 > "`+out+`"`)
	var logs testenv.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	proc := testenv.Spawn(t, cmd)
	peak := peakRSS(proc)
	if code := proc.Wait(t, 0); code != 0 {
		t.Fatalf("listen exited %d; logs:\n%s", code, logs.String())
	}
	got, _ := os.ReadFile(out)
	if strings.TrimSpace(string(got)) != want {
		t.Fatalf("the worker read a body with digest %q, want %s; logs:\n%s", got, want, logs.String())
	}
	if peak == 0 || peak >= memoryBound {
		t.Errorf("watchbot's peak resident set was %d MiB, want below %d MiB", peak>>20, memoryBound>>20)
	}
	t.Logf("peak resident set %.1f MiB for a %d MiB payload", float64(peak)/(1<<20), payloadSize>>20)
	if testenv.ObjectExists(t, s3c, bucket, p.Key) {
		t.Error("the object is still there after its message succeeded")
	}
}

// peakRSS returns the peak resident set size of proc, read until it exits. VmHWM only grows:
// the last reading before the process exits is its peak.
func peakRSS(proc *testenv.Process) int64 {
	peak := int64(0)
	for {
		select {
		case <-proc.Done():
			return peak
		case <-time.After(50 * time.Millisecond):
			if hwm, ok := vmHWM(proc.Cmd.Process.Pid); ok {
				peak = max(peak, hwm)
			}
		}
	}
}

// vmHWM reads a process's peak resident set size, in bytes, from /proc/PID/status.
func vmHWM(pid int) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// randomBytes reads an endless stream of pseudo-random bytes, so the payload does not
// compress and is not all one byte.
type randomBytes struct{ src *rand.ChaCha8 }

func (r *randomBytes) Read(p []byte) (int, error) { return r.src.Read(p) }

func TestListenPayloadFlags(t *testing.T) {
	const q = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	cfg, _, err := parseListen(t, "--queue-url", q, "--payload-bucket", "one", "--payload-bucket", "two.b", "--keep-payloads", "--", "w")
	if err != nil || !slices.Equal(cfg.Payload.Buckets, []string{"one", "two.b"}) || !cfg.Payload.Keep {
		t.Fatalf("config %+v, %v", cfg.Payload, err)
	}
	t.Setenv("WATCHBOT_PAYLOAD_BUCKETS", "a-1,b-2")
	if cfg, _, err = parseListen(t, "--queue-url", q, "--", "w"); err != nil || !slices.Equal(cfg.Payload.Buckets, []string{"a-1", "b-2"}) {
		t.Fatalf("from the environment: %+v, %v", cfg.Payload, err)
	}
	t.Setenv("WATCHBOT_PAYLOAD_BUCKETS", "")
	for args, want := range map[string]string{
		"--keep-payloads":                  "--keep-payloads: needs --payload-bucket",
		"--payload-bucket s3://my-bucket":  "--payload-bucket",
		"--payload-bucket Not_A_Bucket_42": "is not a bucket name",
	} {
		_, _, err := parseListen(t, append(append([]string{"--queue-url", q}, strings.Fields(args)...), "--", "w")...)
		if err == nil || !strings.Contains(withFlags(err, settingFlags).Error(), want) {
			t.Errorf("%s: %v, want %q", args, withFlags(err, settingFlags), want)
		}
	}
}
