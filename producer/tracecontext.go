package producer

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/internal/tracing"
)

// The message attributes that carry the W3C trace context (docs/tracing.md).
const (
	TraceParentAttribute = tracing.Traceparent
	TraceStateAttribute  = tracing.Tracestate
)

// TraceContext is the W3C trace context a Request hands on to every message it sends: the
// values of the traceparent and tracestate attributes, already checked by the caller.
// The zero value carries none.
type TraceContext struct {
	TraceParent, TraceState string
}

// withTraceContext returns m with tc's attributes added as far as SQS's limits allow, and
// why a part of the context was left out ("" when none was). The context never makes a
// message fail: it is dropped whole when the message already has all its attributes, when
// the attributes name a traceparent of their own (the caller's choice wins) or when it would
// push the message past limits' size; tracestate alone is dropped when only one attribute
// is free. m's attributes are copied, not changed.
func withTraceContext(m Message, tc TraceContext, l Limits) (Message, string) {
	if tc.TraceParent == "" {
		return m, ""
	}
	for name := range m.Attributes {
		if strings.EqualFold(name, TraceParentAttribute) {
			return m, ""
		}
	}
	free := sqsspec.MaxMessageAttributes - len(m.Attributes)
	if free < 1 {
		return m, fmt.Sprintf("sent without its trace context: it already has %d message attributes, SQS's most", len(m.Attributes))
	}
	out := m
	out.Attributes = make(map[string]types.MessageAttributeValue, len(m.Attributes)+2)
	for name, v := range m.Attributes {
		out.Attributes[name] = v
	}
	out.Attributes[TraceParentAttribute] = stringAttribute(tc.TraceParent)
	note := ""
	if tc.TraceState != "" {
		if free >= 2 {
			out.Attributes[TraceStateAttribute] = stringAttribute(tc.TraceState)
		} else {
			note = fmt.Sprintf("sent without its tracestate: traceparent takes the last of SQS's %d message attributes", sqsspec.MaxMessageAttributes)
		}
	}
	if l.MaxSize > 0 && Size(out) > l.MaxSize {
		return m, fmt.Sprintf("sent without its trace context: with it the message would pass the queue's MaximumMessageSize of %d bytes", l.MaxSize)
	}
	return out, note
}

func stringAttribute(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}
