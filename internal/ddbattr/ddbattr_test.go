package ddbattr

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestRoundTrip(t *testing.T) {
	item := map[string]types.AttributeValue{"s": S("tenant-7"), "n": N(-1234567890123), "bad": &types.AttributeValueMemberN{Value: "1.5"}}
	if got := String(item, "s"); got != "tenant-7" {
		t.Errorf("String = %q", got)
	}
	if got := String(item, "n"); got != "" {
		t.Errorf("String of a number = %q, want empty", got)
	}
	if got, err := Int(item, "n"); err != nil || got != -1234567890123 {
		t.Errorf("Int = %d, %v", got, err)
	}
	for _, name := range []string{"s", "missing", "bad"} {
		if _, err := Int(item, name); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Int(%q) error %v, want one naming it", name, err)
		}
	}
}
