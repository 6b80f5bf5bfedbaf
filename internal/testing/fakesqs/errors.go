package fakesqs

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// errorKind is one SQS error as SQS's JSON protocol sends it ("Interpreting Amazon SQS JSON
// API responses" in the SQS Developer Guide): the shape named in the body's "__type", the
// code in the x-amzn-query-error header, and the HTTP status. The AWS SDK for Go v2 reports
// the header's code as ErrorCode(), so that code is what both faces of the Server return.
type errorKind struct {
	shape  string // "__type" is "com.amazonaws.sqs#" + shape
	code   string // x-amzn-query-error is code + ";Sender" (or ";Receiver" for status 500)
	status int
}

// Dialect is how the HTTP face names an error. SQS names each error twice, its shape's name in
// the body's "__type" (QueueDoesNotExist) and the code of its older query protocol in the
// x-amzn-query-error header (AWS.SimpleQueueService.NonExistentQueue). The AWS SDK for Go v2
// builds its modelled type (types.QueueDoesNotExist) from the shape whichever it gets, and
// reports the header's code as ErrorCode() when there is one, the shape's name when not; so
// code that matches errors by name sees two names for one error.
type Dialect int32

const (
	// QueryCodes answers as SQS does, with the header. The default.
	QueryCodes Dialect = iota
	// ShapeCodes answers in the JSON protocol alone, without the header: ErrorCode() is the
	// shape's name, and so is the Code of a failed batch entry.
	ShapeCodes
)

// SetDialect sets how the HTTP face names errors from now on. The in-memory face returns
// what the SDK returns for QueryCodes.
func (s *Server) SetDialect(d Dialect) { s.dialect.Store(int32(d)) }

// kindsByCode finds an error's kind again from its ErrorCode(), for the HTTP face.
var kindsByCode = map[string]errorKind{}

func kind(shape, code string, status int) errorKind {
	k := errorKind{shape: shape, code: code, status: status}
	kindsByCode[code] = k
	return k
}

// The errors the Server returns. Codes of modelled errors are the awsQueryError codes of
// the SQS API model; the others are listed in the SQS API Reference's "Common Errors".
var (
	errQueueDoesNotExist      = kind("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400)
	errQueueNameExists        = kind("QueueNameExists", "QueueAlreadyExists", 400)
	errInvalidAddress         = kind("InvalidAddress", "InvalidAddress", 400)
	errInvalidAttributeName   = kind("InvalidAttributeName", "InvalidAttributeName", 400)
	errInvalidAttributeValue  = kind("InvalidAttributeValue", "InvalidAttributeValue", 400)
	errInvalidMessageContents = kind("InvalidMessageContents", "InvalidMessageContents", 400)
	errReceiptHandleIsInvalid = kind("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 400)
	errMessageNotInflight     = kind("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400)
	errEmptyBatchRequest      = kind("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400)
	errTooManyEntries         = kind("TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400)
	errBatchIdsNotDistinct    = kind("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400)
	errInvalidBatchEntryID    = kind("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400)
	errBatchRequestTooLong    = kind("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400)
	errPurgeQueueInProgress   = kind("PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 400)
	errInvalidParameterValue  = kind("InvalidParameterValue", "InvalidParameterValue", 400)
	errMissingParameter       = kind("MissingParameter", "MissingParameter", 400)
	errInternalFailure        = kind("InternalFailure", "InternalFailure", 500)
	// Only the HTTP face returns these two: the in-memory face has no unknown operations
	// and no bodies to parse.
	errInvalidAction          = kind("InvalidAction", "InvalidAction", 400)
	errSerializationException = kind("SerializationException", "SerializationException", 400)
)

// modelled builds the SDK's own error type for the shapes the SQS model declares, with the
// code override the SDK sets from the x-amzn-query-error header.
var modelled = map[string]func(msg, code *string) error{
	"QueueDoesNotExist": func(m, c *string) error { return &types.QueueDoesNotExist{Message: m, ErrorCodeOverride: c} },
	"QueueNameExists":   func(m, c *string) error { return &types.QueueNameExists{Message: m, ErrorCodeOverride: c} },
	"InvalidAddress":    func(m, c *string) error { return &types.InvalidAddress{Message: m, ErrorCodeOverride: c} },
	"InvalidAttributeName": func(m, c *string) error {
		return &types.InvalidAttributeName{Message: m, ErrorCodeOverride: c}
	},
	"InvalidAttributeValue": func(m, c *string) error {
		return &types.InvalidAttributeValue{Message: m, ErrorCodeOverride: c}
	},
	"InvalidMessageContents": func(m, c *string) error {
		return &types.InvalidMessageContents{Message: m, ErrorCodeOverride: c}
	},
	"ReceiptHandleIsInvalid": func(m, c *string) error {
		return &types.ReceiptHandleIsInvalid{Message: m, ErrorCodeOverride: c}
	},
	"MessageNotInflight": func(m, c *string) error { return &types.MessageNotInflight{Message: m, ErrorCodeOverride: c} },
	"EmptyBatchRequest":  func(m, c *string) error { return &types.EmptyBatchRequest{Message: m, ErrorCodeOverride: c} },
	"TooManyEntriesInBatchRequest": func(m, c *string) error {
		return &types.TooManyEntriesInBatchRequest{Message: m, ErrorCodeOverride: c}
	},
	"BatchEntryIdsNotDistinct": func(m, c *string) error {
		return &types.BatchEntryIdsNotDistinct{Message: m, ErrorCodeOverride: c}
	},
	"InvalidBatchEntryId": func(m, c *string) error {
		return &types.InvalidBatchEntryId{Message: m, ErrorCodeOverride: c}
	},
	"BatchRequestTooLong": func(m, c *string) error {
		return &types.BatchRequestTooLong{Message: m, ErrorCodeOverride: c}
	},
	"PurgeQueueInProgress": func(m, c *string) error {
		return &types.PurgeQueueInProgress{Message: m, ErrorCodeOverride: c}
	},
}

// errorf returns the error of kind k as the SDK would return it after reading SQS's answer:
// the SDK's modelled type where the model has one, else a *smithy.GenericAPIError.
func (k errorKind) errorf(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if build, ok := modelled[k.shape]; ok {
		code := k.code
		return build(&msg, &code)
	}
	fault := smithy.FaultClient
	if k.status >= 500 {
		fault = smithy.FaultServer
	}
	return &smithy.GenericAPIError{Code: k.code, Message: msg, Fault: fault}
}

func internalFailure() error {
	return errInternalFailure.errorf("We encountered an internal error. Please try again. (injected by fakesqs)")
}

// batchFailure turns a per-entry error into the Failed entry of a batch answer; its Code is
// the ErrorCode() the single call would have returned.
func batchFailure(id string, err error) types.BatchResultErrorEntry {
	e := types.BatchResultErrorEntry{Id: &id, SenderFault: true}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code, msg := apiErr.ErrorCode(), apiErr.ErrorMessage()
		e.Code, e.Message = &code, &msg
		e.SenderFault = apiErr.ErrorFault() != smithy.FaultServer
		return e
	}
	code, msg := errInternalFailure.code, err.Error()
	e.Code, e.Message, e.SenderFault = &code, &msg, false
	return e
}

// wireError is how the HTTP face answers err.
func wireError(err error) (kind errorKind, message string) {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		if k, ok := kindsByCode[apiErr.ErrorCode()]; ok {
			return k, apiErr.ErrorMessage()
		}
	}
	return errInternalFailure, err.Error()
}
