package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// fauxqs serves S3 on its SQS port (node_modules/fauxqs/README.md, "S3"). The AWS SDK
// addresses buckets virtual-hosted style (BUCKET.127.0.0.1:PORT) unless told otherwise, which
// does not resolve; every client here uses path style (127.0.0.1:PORT/BUCKET/KEY), and so does
// watchbot whenever its S3 endpoint comes from the environment (internal/awsenv).

// S3 returns a real S3 client that sends every request to the emulator.
func (e *Emulator) S3() *s3.Client { return S3ClientFor(e.Endpoint) }

// S3ClientFor returns a real S3 client, path style, that sends every request to endpoint (the
// emulator or a proxy in front of it) with the test credentials and Region; opts adjust it
// further.
func S3ClientFor(endpoint string, opts ...func(*s3.Options)) *s3.Client {
	return s3.NewFromConfig(config(), append([]func(*s3.Options){func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	}}, opts...)...)
}

var bucketSeq atomic.Int64

// NewBucket creates a uniquely named bucket for this test and returns its name.
func (e *Emulator) NewBucket(tb testing.TB) string {
	tb.Helper()
	name := bucketName(tb.Name(), bucketSeq.Add(1))
	CreateBucket(tb, e.S3(), name)
	return name
}

// CreateBucket creates the bucket name; creating one that exists succeeds.
func CreateBucket(tb testing.TB, c *s3.Client, name string) {
	tb.Helper()
	_, err := c.CreateBucket(tb.Context(), &s3.CreateBucketInput{Bucket: aws.String(name)})
	var owned *s3types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		tb.Fatalf("create bucket %s: %v", name, err)
	}
}

// bucketName turns a test name into a legal bucket name: 3 to 63 lowercase letters, digits
// and hyphens, unique per process.
func bucketName(test string, seq int64) string {
	suffix := "-" + strconv.FormatInt(seq, 10) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	b := []byte(strings.ToLower(test))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	name := strings.Trim(string(b), "-")
	if max := 63 - len(suffix); len(name) > max {
		name = strings.Trim(name[len(name)-max:], "-")
	}
	if name == "" {
		name = "bucket"
	}
	return name + suffix
}

// PutObject writes body to bucket/key.
func PutObject(tb testing.TB, c *s3.Client, bucket, key string, body []byte) {
	tb.Helper()
	_, err := c.PutObject(tb.Context(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		tb.Fatalf("put s3://%s/%s: %v", bucket, key, err)
	}
}

// PutLargeObject writes size bytes from body to bucket/key in parts of partSize bytes, a
// multipart upload, so that neither the test nor the emulator holds the whole object in one
// request.
func PutLargeObject(tb testing.TB, c *s3.Client, bucket, key string, body io.Reader, size, partSize int64) {
	tb.Helper()
	ctx := tb.Context()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		tb.Fatalf("start upload of s3://%s/%s: %v", bucket, key, err)
	}
	var parts []s3types.CompletedPart
	buf := make([]byte, partSize)
	for n, written := int32(1), int64(0); written < size; n++ {
		chunk := buf[:min(partSize, size-written)]
		if _, err := io.ReadFull(body, chunk); err != nil {
			tb.Fatalf("read part %d: %v", n, err)
		}
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(n), Body: bytes.NewReader(chunk), ContentLength: aws.Int64(int64(len(chunk))),
		})
		if err != nil {
			tb.Fatalf("upload part %d of s3://%s/%s: %v", n, bucket, key, err)
		}
		// The SDK escapes the ETag's quotes as &#34;, which fauxqs does not unescape; S3 takes
		// the ETag with or without its quotes.
		etag := strings.Trim(aws.ToString(out.ETag), `"`)
		parts = append(parts, s3types.CompletedPart{ETag: aws.String(etag), PartNumber: aws.Int32(n)})
		written += int64(len(chunk))
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		tb.Fatalf("complete upload of s3://%s/%s: %v", bucket, key, err)
	}
}

// ObjectExists reports whether bucket/key exists.
func ObjectExists(tb testing.TB, c *s3.Client, bucket, key string) bool {
	tb.Helper()
	_, err := c.HeadObject(tb.Context(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	var api smithy.APIError
	switch {
	case err == nil:
		return true
	case errors.As(err, &api) && (api.ErrorCode() == "NotFound" || api.ErrorCode() == "NoSuchKey"):
		return false
	default:
		tb.Fatalf("head s3://%s/%s: %v", bucket, key, err)
		return false
	}
}

// GetObject returns the bytes of bucket/key.
func GetObject(tb testing.TB, c *s3.Client, bucket, key string) []byte {
	tb.Helper()
	out, err := c.GetObject(tb.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		tb.Fatalf("get s3://%s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		tb.Fatalf("read s3://%s/%s: %v", bucket, key, err)
	}
	return b
}

// PayloadFixture is a pointer message of payload/testdata: a body and message attributes in
// the exact form an SQS Extended Client library sends them (payload/testdata/README.md).
type PayloadFixture struct {
	Body       string
	Attributes map[string]types.MessageAttributeValue
}

// ReadPayloadFixture reads payload/testdata/name ("java.json", "python.json", …).
func ReadPayloadFixture(tb testing.TB, name string) PayloadFixture {
	tb.Helper()
	root, err := Root()
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "payload", "testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	var f struct {
		Body              string
		MessageAttributes map[string]struct{ DataType, StringValue string }
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	out := PayloadFixture{Body: f.Body, Attributes: map[string]types.MessageAttributeValue{}}
	for n, v := range f.MessageAttributes {
		out.Attributes[n] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
	}
	return out
}
