package awsenv

import (
	"errors"
	"fmt"
	"testing"

	"github.com/aws/smithy-go"
)

func TestDenied(t *testing.T) {
	for _, c := range []struct {
		err  error
		code string
		ok   bool
	}{
		{&smithy.GenericAPIError{Code: "AccessDeniedException"}, "AccessDeniedException", true},
		{fmt.Errorf("get queue attributes: %w", &smithy.GenericAPIError{Code: "AccessDenied"}), "AccessDenied", true},
		{&smithy.GenericAPIError{Code: "KMS.AccessDeniedException"}, "KMS.AccessDeniedException", true},
		{&smithy.GenericAPIError{Code: "ThrottlingException"}, "", false},
		{errors.New("connection refused"), "", false},
		{nil, "", false},
	} {
		if code, ok := Denied(c.err); code != c.code || ok != c.ok {
			t.Errorf("Denied(%v) = %q, %v; want %q, %v", c.err, code, ok, c.code, c.ok)
		}
	}
}
