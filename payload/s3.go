package payload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Getter reads objects; listen fetches payloads with it.
type Getter interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// Deleter deletes objects; listen cleans up with it.
type Deleter interface {
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// Putter writes objects; send offloads with it.
type Putter interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// API is all S3 calls watchbot makes for payloads.
type API interface {
	Getter
	Deleter
	Putter
}

var _ API = (*s3.Client)(nil)

// Fetch streams the object p names into w and returns how many bytes it wrote. Memory stays
// bounded whatever the object's size: the body is copied through a small buffer. An error
// says which object and wraps the SDK's, so Permanent can classify it.
func Fetch(ctx context.Context, api Getter, p Pointer, w io.Writer) (int64, error) {
	out, err := api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(p.Bucket), Key: aws.String(p.Key)})
	if err != nil {
		return 0, fmt.Errorf("get %s: %w", p, err)
	}
	defer out.Body.Close()
	n, err := io.Copy(w, out.Body)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", p, err)
	}
	if out.ContentLength != nil && *out.ContentLength != n {
		return n, fmt.Errorf("read %s: %d of %d bytes", p, n, *out.ContentLength)
	}
	return n, nil
}

// Delete deletes the object p names. Deleting an object that is already gone succeeds, as S3
// answers it.
func Delete(ctx context.Context, api Deleter, p Pointer) error {
	if _, err := api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(p.Bucket), Key: aws.String(p.Key)}); err != nil {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return nil
}

// Store writes body to bucket under a new random key (NewKey) and returns the pointer to it.
func Store(ctx context.Context, api Putter, bucket string, body []byte) (Pointer, error) {
	p := Pointer{Bucket: bucket, Key: NewKey()}
	_, err := api.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(p.Bucket),
		Key:           aws.String(p.Key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		return Pointer{}, fmt.Errorf("put %s: %w", p, err)
	}
	return p, nil
}

// SizeValue is the value of the size attribute for a body of n bytes, as the libraries write it.
func SizeValue(n int64) string { return strconv.FormatInt(n, 10) }

// permanentCodes are the S3 error codes no retry can cure: the object or bucket is not there,
// or the role may not read it (Amazon S3 API Reference, "Error responses", list of error codes).
var permanentCodes = map[string]bool{
	"NoSuchKey":          true,
	"NoSuchBucket":       true,
	"NotFound":           true, // HEAD's answer for a missing key
	"AccessDenied":       true,
	"AllAccessDisabled":  true,
	"InvalidObjectState": true, // archived in Glacier: a restore is an operator's decision
	"InvalidBucketName":  true,
	"KeyTooLongError":    true,
}

// Permanent reports whether err, from Fetch or Delete, is one that no retry can cure, and a
// short reason naming the S3 error code. Everything else (throttling such as SlowDown, 5xx,
// a cut connection, expired credentials) may pass and is worth retrying.
func Permanent(err error) (reason string, ok bool) {
	if err == nil {
		return "", false
	}
	var api smithy.APIError
	if errors.As(err, &api) && permanentCodes[api.ErrorCode()] {
		return api.ErrorCode(), true
	}
	var resp *awshttp.ResponseError
	if errors.As(err, &resp) {
		switch resp.HTTPStatusCode() {
		case 403:
			return "AccessDenied (HTTP 403)", true
		case 404:
			return "NotFound (HTTP 404)", true
		}
	}
	return "", false
}
