package faultproxy

// S3: the proxy also sits in front of fauxqs's S3 endpoint (path style, the same port). S3
// requests carry no X-Amz-Target; they are told by their SigV4 credential scope, whose service
// is s3, and named from their method and path. Injected errors are shaped as S3 shapes them:
// an XML <Error> with a Code, which the SDK's retryer classifies (InternalError as a retryable
// server error, 503 SlowDown as a throttle).

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The S3 operations a rule may name. Only the object calls are told apart; every other S3
// request (a bucket's creation, a multipart upload's steps) is S3Other.
const (
	S3GetObject    = "S3.GetObject"
	S3PutObject    = "S3.PutObject"
	S3DeleteObject = "S3.DeleteObject"
	S3HeadObject   = "S3.HeadObject"
	S3Other        = "S3.Other"
)

// isS3 reports whether op is an S3 operation.
func isS3(op string) bool { return strings.HasPrefix(op, "S3.") }

// s3Operation names r's S3 operation, when r is an S3 request (ok).
func s3Operation(r *http.Request) (op string, ok bool) {
	if !strings.Contains(r.Header.Get("Authorization"), "/s3/aws4_request") {
		return "", false
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	q := r.URL.Query()
	if bucket == "" || key == "" || q.Has("uploads") || q.Has("uploadId") {
		return S3Other, true
	}
	switch r.Method {
	case http.MethodGet:
		return S3GetObject, true
	case http.MethodPut:
		return S3PutObject, true
	case http.MethodDelete:
		return S3DeleteObject, true
	case http.MethodHead:
		return S3HeadObject, true
	}
	return S3Other, true
}

// s3Error is an error answer in S3's REST-XML shape (Amazon S3 API Reference, "Error
// responses").
type s3Error struct {
	status  int
	code    string
	message string
}

var (
	s3InternalError = s3Error{http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again. (injected by faultproxy)"}
	s3SlowDown      = s3Error{http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate. (injected by faultproxy)"}
)

// writeS3Error answers with e; seq names the request in x-amz-request-id. A HEAD answer has
// no body, as S3's has none.
func writeS3Error(w http.ResponseWriter, seq int, e s3Error) {
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n<Error><Code>%s</Code><Message>%s</Message><RequestId>faultproxy-%d</RequestId></Error>", e.code, e.message, seq)
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amz-Request-Id", "faultproxy-"+strconv.Itoa(seq))
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(body))
}
