package testenv

import (
	"bytes"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestS3Emulator: the calls payloads use work on the emulator's S3, path style.
func TestS3Emulator(t *testing.T) {
	emu := SQS(t)
	c := emu.S3()
	bucket := emu.NewBucket(t)
	CreateBucket(t, c, bucket) // again: idempotent
	PutObject(t, c, bucket, "a/b.json", []byte(`{"x":1}`))
	if got := GetObject(t, c, bucket, "a/b.json"); string(got) != `{"x":1}` {
		t.Fatalf("GetObject = %q", got)
	}
	if !ObjectExists(t, c, bucket, "a/b.json") || ObjectExists(t, c, bucket, "missing") {
		t.Fatal("ObjectExists is wrong")
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), (5<<20+100)/16)
	PutLargeObject(t, c, bucket, "big", bytes.NewReader(body), int64(len(body)), 5<<20)
	if got := GetObject(t, c, bucket, "big"); !bytes.Equal(got, body) {
		t.Fatalf("multipart object: %d bytes, want %d", len(got), len(body))
	}
	if _, err := c.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("a/b.json")}); err != nil {
		t.Fatal(err)
	}
	if ObjectExists(t, c, bucket, "a/b.json") {
		t.Fatal("deleted object still there")
	}
}

func TestBucketName(t *testing.T) {
	for _, test := range []string{"TestX/sub_case", strings.Repeat("A", 100), "///"} {
		name := bucketName(test, 12)
		if len(name) < 3 || len(name) > 63 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || name[0] == '-' {
			t.Errorf("bucketName(%q) = %q", test, name)
		}
	}
}

func TestReadPayloadFixture(t *testing.T) {
	f := ReadPayloadFixture(t, "java.json")
	if !strings.HasPrefix(f.Body, `["software.amazon.payloadoffloading.PayloadS3Pointer",`) || aws.ToString(f.Attributes["ExtendedPayloadSize"].DataType) != "Number" {
		t.Fatalf("fixture = %+v", f)
	}
}
