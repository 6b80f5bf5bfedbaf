package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

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
