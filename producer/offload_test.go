package producer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/payload"
)

// bodyText reads a body whole, wherever it is kept.
func bodyText(t *testing.T, b Body) string {
	t.Helper()
	r := b.reader()
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestReadLinesSpooled(t *testing.T) {
	const chunk = 64 * 1024 // the reader's buffer: where ReadSlice splits a long line
	long := strings.Repeat("x", sqsspec.MaxMessageSize+1)
	crAtChunkEnd := strings.Repeat("y", 17*chunk-1) // its "\r" ends a chunk, its "\n" starts the next
	tests := []struct {
		name    string
		in      string
		want    []string
		spooled []bool
	}{
		{"short lines as ReadLines", "a\r\nb\n\nc", []string{"a", "b", "", "c"}, []bool{false, false, false, false}},
		{"a long line between short ones", "a\n" + long + "\nb\n", []string{"a", long, "b"}, []bool{false, true, false}},
		{"a long last line without newline", long, []string{long}, []bool{true}},
		{"a long line with CRLF", long + "\r\nz\r\n", []string{long, "z"}, []bool{true, false}},
		{"CR at a chunk's end", crAtChunkEnd + "\r\n", []string{crAtChunkEnd}, []bool{true}},
		{"CR inside a long line is kept", crAtChunkEnd + "\rq\n", []string{crAtChunkEnd + "\rq"}, []bool{true}},
		{"exactly 1 MiB stays in memory", strings.Repeat("m", sqsspec.MaxMessageSize) + "\n", []string{strings.Repeat("m", sqsspec.MaxMessageSize)}, []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spool, err := os.Create(filepath.Join(t.TempDir(), "spool"))
			if err != nil {
				t.Fatal(err)
			}
			defer spool.Close()
			got, err := ReadLinesSpooled(strings.NewReader(tt.in), "stdin", spool)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d lines, want %d", len(got), len(tt.want))
			}
			for i, b := range got {
				if text := bodyText(t, b); text != tt.want[i] {
					t.Errorf("line %d: %d bytes %.20q…, want %d bytes", i+1, len(text), text, len(tt.want[i]))
				}
				if (b.Large != nil) != tt.spooled[i] {
					t.Errorf("line %d spooled: %v, want %v", i+1, b.Large != nil, tt.spooled[i])
				}
				if b.Size() != int64(len(tt.want[i])) {
					t.Errorf("line %d: Size %d, want %d", i+1, b.Size(), len(tt.want[i]))
				}
				if want := "stdin line " + string(rune('1'+i)); b.Source != want {
					t.Errorf("source %q, want %q", b.Source, want)
				}
			}
		})
	}
}

// offloadQueue is a queue on the emulator that takes messages of at most maxSize bytes, and
// a bucket beside it.
func offloadQueue(t *testing.T, maxSize string) (emu *testenv.Emulator, url, bucket string) {
	t.Helper()
	emu = testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{Attributes: map[string]string{"MaximumMessageSize": maxSize}})
	return emu, q.URL, emu.NewBucket(t)
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestDeliverOffloadsInTheLibrariesFormat sends through the emulator's SQS and S3: a body over
// the threshold becomes an object and a pointer message whose body is, byte for byte, what the
// Java library writes (its golden fixture with our bucket and key), and whose attributes are
// the sender's plus ExtendedPayloadSize as the fixture has it; a body under it stays inline.
func TestDeliverOffloadsInTheLibrariesFormat(t *testing.T) {
	emu, url, bucket := offloadQueue(t, "1024")
	s3c := emu.S3()
	_, kind, _ := ParseAttribute("kind=doc")
	attrs := map[string]types.MessageAttributeValue{"kind": kind}
	big := strings.Repeat("é", 600) // 1200 bytes: over the queue's 1024
	small := "small body"
	req := Request{QueueURL: url, Attributes: attrs, Bodies: []Body{{Text: big, Source: "big"}, {Text: small, Source: "small"}},
		Offload: &Offload{Bucket: bucket, API: s3c}}
	results, err := Deliver(t.Context(), emu.Client(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	got := testenv.Drain(t, emu.Client(), url, 10*time.Second)
	if len(got) != 2 {
		t.Fatalf("%d messages, want 2", len(got))
	}
	fixture := testenv.ReadPayloadFixture(t, "java.json")
	golden, err := payload.Parse(fixture.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got {
		body := aws.ToString(m.Body)
		if body == small {
			if _, ok := m.MessageAttributes[payload.SizeAttribute]; ok || len(m.MessageAttributes) != 1 {
				t.Errorf("inline message has attributes %v", m.MessageAttributes)
			}
			continue
		}
		p, err := payload.Parse(body)
		if err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		want := strings.Replace(strings.Replace(fixture.Body, golden.Bucket, p.Bucket, 1), golden.Key, p.Key, 1)
		if body != want {
			t.Errorf("pointer body\n%s\nis not the Java library's\n%s", body, want)
		}
		if p.Bucket != bucket || !uuidV4.MatchString(p.Key) {
			t.Errorf("pointer %v: want bucket %s and a random UUID key, as the libraries write", p, bucket)
		}
		wantAttrs := map[string]types.MessageAttributeValue{"kind": kind}
		for name, v := range fixture.Attributes {
			v.StringValue = aws.String("1200")
			wantAttrs[name] = v
		}
		opts := cmp.Comparer(func(a, b types.MessageAttributeValue) bool {
			return aws.ToString(a.DataType) == aws.ToString(b.DataType) && aws.ToString(a.StringValue) == aws.ToString(b.StringValue)
		})
		if diff := cmp.Diff(wantAttrs, m.MessageAttributes, opts); diff != "" {
			t.Errorf("attributes (-want +got):\n%s", diff)
		}
		if obj := testenv.GetObject(t, s3c, p.Bucket, p.Key); string(obj) != big {
			t.Errorf("object holds %d bytes, want the %d of the body", len(obj), len(big))
		}
	}
}

func TestDeliverOffloadThreshold(t *testing.T) {
	emu, url, bucket := offloadQueue(t, "262144")
	_, kind, _ := ParseAttribute("kind=test") // 4 + 6 + 4 = 14 bytes, as SQS counts them
	attrs := map[string]types.MessageAttributeValue{"kind": kind}
	spooled := filepath.Join(t.TempDir(), "big")
	bigFile := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB, more than SQS ever takes
	if err := os.WriteFile(spooled, bigFile, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(spooled)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name    string
		offload Offload
		body    Body
		pointer bool
	}{
		{"at the threshold with attributes", Offload{Threshold: 100}, Body{Text: strings.Repeat("a", 86)}, false},
		{"one byte over, counting attributes", Offload{Threshold: 100}, Body{Text: strings.Repeat("a", 87)}, true},
		{"default threshold is the queue's size", Offload{}, Body{Text: strings.Repeat("b", 262144-14)}, false},
		{"over the queue's size", Offload{}, Body{Text: strings.Repeat("b", 262144-13)}, true},
		{"always", Offload{Always: true}, Body{Text: "tiny"}, true},
		{"a body kept out of memory", Offload{}, Body{Large: io.NewSectionReader(f, 0, int64(len(bigFile)))}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.offload
			o.Bucket, o.API = bucket, emu.S3()
			tt.body.Source = tt.name
			results, err := Deliver(t.Context(), emu.Client(), Request{QueueURL: url, Attributes: attrs, Bodies: []Body{tt.body}, Offload: &o})
			if err != nil || results[0].Err != nil {
				t.Fatalf("Deliver: %v %+v", err, results)
			}
			got := testenv.Drain(t, emu.Client(), url, 10*time.Second)
			if len(got) != 1 {
				t.Fatalf("%d messages", len(got))
			}
			p, perr := payload.Parse(aws.ToString(got[0].Body))
			if (perr == nil) != tt.pointer {
				t.Fatalf("sent as a pointer: %v, want %v", perr == nil, tt.pointer)
			}
			if !tt.pointer {
				return
			}
			if obj := testenv.GetObject(t, emu.S3(), p.Bucket, p.Key); string(obj) != bodyText(t, tt.body) {
				t.Errorf("object holds %d bytes, want %d", len(obj), tt.body.Size())
			}
			if v := aws.ToString(got[0].MessageAttributes[payload.SizeAttribute].StringValue); v != payload.SizeValue(tt.body.Size()) {
				t.Errorf("%s = %s, want %d", payload.SizeAttribute, v, tt.body.Size())
			}
		})
	}
}

func TestDeliverOffloadRefusals(t *testing.T) {
	emu, url, bucket := offloadQueue(t, "1024")
	big := Body{Text: strings.Repeat("z", 2000), Source: "--body"}
	reserved := map[string]types.MessageAttributeValue{payload.SizeAttribute: {DataType: aws.String("Number"), StringValue: aws.String("1")}}
	ten := map[string]types.MessageAttributeValue{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		ten[n] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	tests := []struct {
		name  string
		req   Request
		input bool   // refused before anything is written or sent
		want  string // in the error, or in the message's result
	}{
		{"too large without a bucket", Request{Bodies: []Body{{Large: io.NewSectionReader(strings.NewReader(big.Text), 0, 2000), Source: "--file f"}}},
			true, "--file f: the body is 2000 bytes, more than the queue's MaximumMessageSize of 1024: send it through S3 with Offload.Bucket"},
		{"reserved attribute", Request{Bodies: []Body{big}, Attributes: reserved, Offload: &Offload{Bucket: bucket}}, true, "ExtendedPayloadSize"},
		{"no room for the size attribute", Request{Bodies: []Body{big}, Attributes: ten, Offload: &Offload{Bucket: bucket}}, true, "10 message attributes leave no room for ExtendedPayloadSize"},
		{"threshold above the queue's", Request{Bodies: []Body{big}, Offload: &Offload{Bucket: bucket, Threshold: 2048}}, true, "above the queue's MaximumMessageSize of 1024"},
		{"threshold above SQS's", Request{Bodies: []Body{big}, Offload: &Offload{Bucket: bucket, Threshold: 2 << 20}}, true, "must be between 1 and 1048576"},
		{"more than one PutObject takes", Request{Bodies: []Body{{Large: io.NewSectionReader(strings.NewReader(""), 0, MaxObjectSize+1), Source: "--file huge"}}, Offload: &Offload{Bucket: bucket}},
			true, "--file huge: the body is 5368709121 bytes, more than the 5368709120 S3 takes in one PutObject"},
		{"empty body", Request{Bodies: []Body{{Source: "stdin line 1"}}, Offload: &Offload{Bucket: bucket}}, true, "stdin line 1: the body is empty"},
		{"missing bucket", Request{Bodies: []Body{big}, Offload: &Offload{Bucket: "no-such-bucket-" + bucket[:10]}}, false, "NoSuchBucket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.QueueURL = url
			if tt.req.Offload != nil {
				tt.req.Offload.API = emu.S3()
			}
			results, err := Deliver(t.Context(), emu.Client(), tt.req)
			var bad *InputError
			switch {
			case tt.input && (!errors.As(err, &bad) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Deliver = %v, want an input error with %q", err, tt.want)
			case !tt.input && (err != nil || results[0].Err == nil || !strings.Contains(results[0].Err.Error(), tt.want)):
				t.Fatalf("Deliver = %v, %+v; want the message to fail with %q", err, results, tt.want)
			}
			if got := testenv.Drain(t, emu.Client(), url, 10*time.Second); len(got) != 0 {
				t.Errorf("%d messages sent", len(got))
			}
		})
	}
}

// recordingS3 is the emulator's S3, remembering the keys written.
type recordingS3 struct {
	*s3.Client
	keys []string
}

func (r *recordingS3) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	r.keys = append(r.keys, aws.ToString(in.Key))
	return r.Client.PutObject(ctx, in, opts...)
}

// TestOffloadUndo: a message SQS refused leaves no object behind; one whose fate is unknown
// keeps its object, since it may have been sent, and says where the object is.
func TestOffloadUndo(t *testing.T) {
	emu := testenv.SQS(t)
	bucket := emu.NewBucket(t)
	s3c := &recordingS3{Client: emu.S3()}
	o := &Offload{Bucket: bucket, Always: true, API: s3c}
	var msgs []Message
	var objects []*object
	for _, body := range []string{"a", "b", "c", "d"} {
		m, obj := o.pointerMessage(Message{Body: body}, Body{Text: body})
		msgs, objects = append(msgs, m), append(objects, obj)
	}
	results := make([]Result, len(msgs))
	sendOffloaded(t.Context(), failingBatch{}, s3c, "u", msgs, objects, func(i int, r Result) { results[i] = r })
	if len(s3c.keys) != 4 {
		t.Fatalf("%d objects written, want 4", len(s3c.keys))
	}
	for i, want := range []bool{true, false, true, true} {
		if got := testenv.ObjectExists(t, emu.S3(), bucket, objects[i].pointer.Key); got != want {
			t.Errorf("message %d: object exists %v, want %v (%v)", i, got, want, results[i].Err)
		}
	}
	if results[0].Err != nil || results[3].Err != nil {
		t.Errorf("sent messages failed: %v, %v", results[0].Err, results[3].Err)
	}
	if err := results[1].Err; err == nil || strings.Contains(err.Error(), "s3://") {
		t.Errorf("refused message: %v (its object is deleted: nothing to name)", err)
	}
	if err := results[2].Err; err == nil || !strings.Contains(err.Error(), "may have been sent") || !strings.Contains(err.Error(), objects[2].pointer.URI()) {
		t.Errorf("unanswered message: %v, want it to name its object", err)
	}
}
