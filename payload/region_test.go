package payload

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// regionalS3 holds objects of one bucket in one region and refuses requests sent to another
// region as S3 does: 301 with the bucket's region in x-amz-bucket-region.
type regionalS3 struct {
	region string
	calls  []string // the region of each request
	bodies []string // what each PutObject read
}

func (r *regionalS3) answer(opts []func(*s3.Options)) error {
	o := s3.Options{Region: "us-east-1"}
	for _, f := range opts {
		f(&o)
	}
	r.calls = append(r.calls, o.Region)
	if o.Region == r.region {
		return nil
	}
	h := http.Header{}
	h.Set("X-Amz-Bucket-Region", r.region)
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 301, Header: h}},
		Err:      errors.New("PermanentRedirect"),
	}}
}

func (r *regionalS3) GetObject(_ context.Context, _ *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	if err := r.answer(opts); err != nil {
		return nil, err
	}
	return &s3.GetObjectOutput{Body: io.NopCloser(strings.NewReader("body")), ContentLength: aws.Int64(4)}, nil
}

func (r *regionalS3) DeleteObject(_ context.Context, _ *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	return &s3.DeleteObjectOutput{}, r.answer(opts)
}

func (r *regionalS3) PutObject(_ context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	b, _ := io.ReadAll(in.Body)
	r.bodies = append(r.bodies, string(b))
	return &s3.PutObjectOutput{}, r.answer(opts)
}

func TestRegionFollower(t *testing.T) {
	s := &regionalS3{region: "ap-southeast-2"}
	f := &RegionFollower{API: s}
	var got strings.Builder
	if _, err := Fetch(t.Context(), f, Pointer{Bucket: "b", Key: "k"}, &got); err != nil || got.String() != "body" {
		t.Fatalf("Fetch = %q, %v", got.String(), err)
	}
	body := strings.NewReader("0123456789")
	_, _ = body.Seek(2, io.SeekStart)
	if _, err := f.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Body: body}); err != nil {
		t.Fatal(err)
	}
	if err := Delete(t.Context(), f, Pointer{Bucket: "b", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	// The first request goes to the client's region; the bucket's is used from then on.
	want := []string{"us-east-1", "ap-southeast-2", "ap-southeast-2", "ap-southeast-2"}
	if strings.Join(s.calls, " ") != strings.Join(want, " ") {
		t.Errorf("regions %v, want %v", s.calls, want)
	}
	if len(s.bodies) != 1 || s.bodies[0] != "23456789" {
		t.Errorf("put bodies %q", s.bodies)
	}

	// A put in the wrong region is sent again from where its body started.
	s2 := &regionalS3{region: "eu-west-1"}
	f2 := &RegionFollower{API: s2}
	body = strings.NewReader("0123456789")
	_, _ = body.Seek(2, io.SeekStart)
	if _, err := f2.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Body: body}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(s2.bodies, ",") != "23456789,23456789" {
		t.Errorf("put bodies %q, want the same bytes twice", s2.bodies)
	}
	// A region S3 names again is not retried for ever.
	s3x := &regionalS3{region: "eu-west-1"}
	f3 := &RegionFollower{API: &stubborn{s3x}}
	if _, err := Fetch(t.Context(), f3, Pointer{Bucket: "b", Key: "k"}, io.Discard); err == nil || len(s3x.calls) != 2 {
		t.Errorf("Fetch from a bucket that always redirects: %v after %d calls, want an error after 2", err, len(s3x.calls))
	}
}

// stubborn redirects to its region whatever region a request is sent to.
type stubborn struct{ *regionalS3 }

func (s *stubborn) GetObject(_ context.Context, _ *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	_ = s.answer(opts)
	h := http.Header{}
	h.Set("X-Amz-Bucket-Region", s.region)
	return nil, &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 301, Header: h}}, Err: errors.New("PermanentRedirect")}}
}
