package deadletter

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/payload"
)

// TestListingShowsPayload: the listing that peek and triage print names a pointer's object and
// size, says what the body shown is, and says why a message marked as a pointer is not one.
func TestListingShowsPayload(t *testing.T) {
	t.Parallel()
	size := func(name, v string) map[string]types.MessageAttributeValue {
		return map[string]types.MessageAttributeValue{name: {DataType: aws.String("Number"), StringValue: aws.String(v)}}
	}
	pointer := payload.Pointer{Bucket: "b", Key: "k"}.Encode()
	fetched := Record{Body: "the body", Payload: &PayloadRecord{Resolved: true}}
	failed := Record{Payload: &PayloadRecord{Error: "NoSuchKey: gone"}}
	tests := []struct {
		name string
		m    Message
		r    *Record
		want []string
		not  []string
	}{
		{"pointer", Message{Body: pointer, Attributes: size(payload.SizeAttribute, "300000")}, nil,
			[]string{"payload:  s3://b/k, 300000 bytes (ExtendedPayloadSize)", "the body below is the pointer", "body:     " + pointer}, nil},
		{"legacy attribute", Message{Body: pointer, Attributes: size(payload.LegacySizeAttribute, "12")}, nil,
			[]string{"payload:  s3://b/k, 12 bytes (SQSLargePayloadSize)"}, nil},
		{"no size attribute", Message{Body: pointer}, nil, []string{"payload:  s3://b/k (no size attribute)"}, nil},
		{"marked but not a pointer", Message{Body: `{"a":1}`, Attributes: size(payload.SizeAttribute, "7")}, nil,
			[]string{"payload:  ExtendedPayloadSize is set, but the message has ExtendedPayloadSize but its body is not a pointer"}, nil},
		{"ordinary", Message{Body: `["x"]`}, nil, []string{`body:     ["x"]`}, []string{"payload:"}},
		{"fetched", Message{Body: pointer, Attributes: size(payload.SizeAttribute, "8")}, &fetched,
			[]string{"the body below is the object's content, fetched from S3 (8 bytes)", "body:     the body"}, []string{"body:     ["}},
		{"not fetched", Message{Body: pointer, Attributes: size(payload.SizeAttribute, "8")}, &failed,
			[]string{"not fetched: NoSuchKey: gone", "body:     " + pointer}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			var err error
			if tt.r != nil {
				err = WriteResolvedListing(&b, tt.m, *tt.r, 0)
			} else {
				err = WriteListing(&b, tt.m, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("listing lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tt.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("listing has %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// TestRecordOfPointer: a Record names the object and the size, and an import of it sends
// the pointer as it was.
func TestRecordOfPointer(t *testing.T) {
	t.Parallel()
	m := Message{ID: "1", Body: payload.Pointer{Bucket: "b", Key: "k"}.Encode(), Attributes: map[string]types.MessageAttributeValue{
		payload.SizeAttribute: {DataType: aws.String("Number"), StringValue: aws.String("42")},
	}}
	r := RecordOf(m)
	if r.Payload == nil || r.Payload.URI != "s3://b/k" || r.Payload.Size == nil || *r.Payload.Size != 42 || r.Payload.SizeAttribute != payload.SizeAttribute {
		t.Fatalf("payload %+v", r.Payload)
	}
	if r.Body != m.Body || r.MessageAttributes[payload.SizeAttribute].StringValue == nil {
		t.Errorf("the record does not keep the pointer message: %+v", r)
	}
	if RecordOf(Message{Body: "plain"}).Payload != nil {
		t.Error("an ordinary message has a payload")
	}
}
