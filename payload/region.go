package payload

import (
	"context"
	"errors"
	"io"
	"sync"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// BucketRegion returns the region S3 names in an answer refusing a request sent to the wrong
// region: a 301 PermanentRedirect or a 400 AuthorizationHeaderMalformed carries the bucket's
// region in the x-amz-bucket-region header ("Making requests", Amazon S3 User Guide, and
// "HeadBucket", Amazon S3 API Reference: x-amz-bucket-region).
func BucketRegion(err error) (string, bool) {
	var resp *awshttp.ResponseError
	if !errors.As(err, &resp) || resp.Response == nil {
		return "", false
	}
	switch resp.HTTPStatusCode() {
	case 301, 400:
		region := resp.Response.Header.Get("X-Amz-Bucket-Region")
		return region, region != ""
	}
	return "", false
}

// RegionFollower is an S3 client for buckets in any region: a request S3 refuses because the
// bucket is in another region than the client's is sent again to that region, which is then
// used for the bucket's further requests. listen fetches with it from an allowed bucket in
// another region than the task's, the operator tools from whatever bucket a pointer names, and
// send writes to a bucket that need not be in the queue's region.
type RegionFollower struct {
	API API

	mu      sync.Mutex
	regions map[string]string // bucket to region, as S3 named it
}

var _ API = (*RegionFollower)(nil)

// in returns the option that sends a request for bucket to its known region, if any.
func (f *RegionFollower) in(bucket *string, opts []func(*s3.Options)) []func(*s3.Options) {
	if bucket == nil {
		return opts
	}
	f.mu.Lock()
	region, ok := f.regions[*bucket]
	f.mu.Unlock()
	if !ok {
		return opts
	}
	return append(opts, func(o *s3.Options) { o.Region = region })
}

// learn records the region err names for bucket, and says whether a retry may succeed.
func (f *RegionFollower) learn(bucket *string, err error) bool {
	region, ok := BucketRegion(err)
	if !ok || bucket == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.regions == nil {
		f.regions = map[string]string{}
	}
	if f.regions[*bucket] == region {
		return false
	}
	f.regions[*bucket] = region
	return true
}

// GetObject is the client's, in the bucket's region.
func (f *RegionFollower) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	out, err := f.API.GetObject(ctx, in, f.in(in.Bucket, opts)...)
	if err != nil && f.learn(in.Bucket, err) {
		return f.API.GetObject(ctx, in, f.in(in.Bucket, opts)...)
	}
	return out, err
}

// DeleteObject is the client's, in the bucket's region.
func (f *RegionFollower) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	out, err := f.API.DeleteObject(ctx, in, f.in(in.Bucket, opts)...)
	if err != nil && f.learn(in.Bucket, err) {
		return f.API.DeleteObject(ctx, in, f.in(in.Bucket, opts)...)
	}
	return out, err
}

// PutObject is the client's, in the bucket's region. A body sent again is read again from
// where it started, so it must be an io.Seeker for the retry.
func (f *RegionFollower) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	seeker, seekable := in.Body.(io.Seeker)
	var start int64
	if seekable {
		var err error
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			seekable = false
		}
	}
	out, err := f.API.PutObject(ctx, in, f.in(in.Bucket, opts)...)
	if err != nil && (seekable || in.Body == nil) && f.learn(in.Bucket, err) {
		if seekable {
			if _, serr := seeker.Seek(start, io.SeekStart); serr != nil {
				return out, err
			}
		}
		return f.API.PutObject(ctx, in, f.in(in.Bucket, opts)...)
	}
	return out, err
}
