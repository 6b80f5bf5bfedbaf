package faultproxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestS3Operation(t *testing.T) {
	const s3Auth = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=x"
	const sqsAuth = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=x"
	tests := []struct {
		method, target, auth, want string
	}{
		{"GET", "/bucket/a/key.json", s3Auth, S3GetObject},
		{"PUT", "/bucket/key", s3Auth, S3PutObject},
		{"DELETE", "/bucket/key?x-id=DeleteObject", s3Auth, S3DeleteObject},
		{"HEAD", "/bucket/key", s3Auth, S3HeadObject},
		{"PUT", "/bucket", s3Auth, S3Other},
		{"PUT", "/bucket/key?partNumber=1&uploadId=u", s3Auth, S3Other},
		{"POST", "/bucket/key?uploads", s3Auth, S3Other},
		{"POST", "/", sqsAuth, NoTarget},
		{"POST", "/", "", NoTarget},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		if tt.auth != "" {
			r.Header.Set("Authorization", tt.auth)
		}
		if got := operation(r); got != tt.want {
			t.Errorf("%s %s: operation = %q, want %q", tt.method, tt.target, got, tt.want)
		}
	}
}

func TestWriteS3Error(t *testing.T) {
	rec := httptest.NewRecorder()
	writeS3Error(rec, 7, s3SlowDown)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "<Code>SlowDown</Code>") || rec.Header().Get("X-Amz-Request-Id") != "faultproxy-7" {
		t.Errorf("answer = %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
}
