package producer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func TestWithTraceContext(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	attrs := func(n int) map[string]types.MessageAttributeValue {
		m := map[string]types.MessageAttributeValue{}
		for i := range n {
			m[fmt.Sprintf("a%d", i)] = stringAttribute("v")
		}
		return m
	}
	full := TraceContext{TraceParent: parent, TraceState: "vendor=x"}
	for _, c := range []struct {
		name       string
		attrs      map[string]types.MessageAttributeValue
		tc         TraceContext
		maxSize    int
		wantAdded  []string // attributes added to the message
		wantNoteIn string   // "" when no warning
	}{
		{"no context", attrs(3), TraceContext{}, 0, nil, ""},
		{"no attributes", nil, full, 0, []string{"traceparent", "tracestate"}, ""},
		{"traceparent alone", attrs(9), TraceContext{TraceParent: parent}, 0, []string{"traceparent"}, ""},
		{"eight attributes: room for both", attrs(8), full, 0, []string{"traceparent", "tracestate"}, ""},
		{"nine attributes: traceparent only", attrs(9), full, 0, []string{"traceparent"}, "sent without its tracestate"},
		{"ten attributes: none", attrs(10), full, 0, nil, "sent without its trace context: it already has 10 message attributes"},
		{"the caller's traceparent wins", map[string]types.MessageAttributeValue{"TraceParent": stringAttribute("mine")}, full, 0, nil, ""},
		{"too large with it", nil, full, len("body") + 20, nil, "would pass the queue's MaximumMessageSize of 24 bytes"},
		{"fits with it", nil, full, 1024, []string{"traceparent", "tracestate"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := Message{Body: "body", Attributes: c.attrs}
			before := len(c.attrs)
			got, note := withTraceContext(m, c.tc, Limits{MaxSize: c.maxSize})
			if len(c.attrs) != before {
				t.Fatal("the caller's attributes were changed")
			}
			if len(got.Attributes) != len(c.attrs)+len(c.wantAdded) {
				t.Errorf("%d attributes, want %d + %v", len(got.Attributes), len(c.attrs), c.wantAdded)
			}
			for _, name := range c.wantAdded {
				want := map[string]string{"traceparent": c.tc.TraceParent, "tracestate": c.tc.TraceState}[name]
				if v := got.Attributes[name]; aws.ToString(v.StringValue) != want || aws.ToString(v.DataType) != "String" {
					t.Errorf("attribute %s = %v %q, want String %q", name, aws.ToString(v.DataType), aws.ToString(v.StringValue), want)
				}
			}
			if (note == "") != (c.wantNoteIn == "") || !strings.Contains(note, c.wantNoteIn) {
				t.Errorf("warning %q, want one containing %q", note, c.wantNoteIn)
			}
			if err := CheckAttributes(got.Attributes); err != nil {
				t.Errorf("the attributes sent would be refused: %v", err)
			}
		})
	}
}
