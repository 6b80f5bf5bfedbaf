package faultproxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is an error answer in the shape of SQS's JSON protocol (awsJson1_0 with the
// awsQueryCompatible trait), which is what the AWS SDK for Go v2 reads: the error code from
// the "__type" field (the part after '#'), overridden by the code before ';' in the
// x-amzn-query-error header; the message from "message". The SDK's retryer classifies the
// resulting code (retry.DefaultThrottleErrorCodes, retry.DefaultRetryableHTTPStatusCodes).
type apiError struct {
	status  int
	typ     string // "__type": namespace#Code
	query   string // x-amzn-query-error: Code;Sender|Receiver
	message string
}

var (
	internalFailure = apiError{
		status:  http.StatusInternalServerError,
		typ:     "com.amazon.coral.service#InternalFailure",
		query:   "InternalFailure;Receiver",
		message: "We encountered an internal error. Please try again. (injected by faultproxy)",
	}
	throttlingException = apiError{
		status:  http.StatusBadRequest,
		typ:     "com.amazon.coral.availability#ThrottlingException",
		query:   ThrottlingException + ";Sender",
		message: "Rate exceeded (injected by faultproxy)",
	}
	requestThrottled = apiError{
		status:  http.StatusBadRequest,
		typ:     "com.amazonaws.sqs#RequestThrottled",
		query:   RequestThrottled + ";Sender",
		message: "Request is throttled. (injected by faultproxy)",
	}
)

// writeAPIError answers with e; seq names the request in x-amzn-RequestId (-1: none).
func writeAPIError(w http.ResponseWriter, seq int, e apiError) {
	body, _ := json.Marshal(map[string]string{"__type": e.typ, "message": e.message})
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amzn-Query-Error", e.query)
	if seq >= 0 {
		h.Set("X-Amzn-Requestid", "faultproxy-"+strconv.Itoa(seq))
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}
