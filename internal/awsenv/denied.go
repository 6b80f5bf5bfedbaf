package awsenv

import (
	"errors"

	"github.com/aws/smithy-go"
)

// Denied returns the error code of a call that AWS refused for want of permission, whichever
// of its names the service answers with: SQS's JSON protocol says AccessDeniedException, its
// query protocol AccessDenied, SNS-style services AuthorizationError, and a queue encrypted
// with a key the role may not use KMS.AccessDeniedException.
func Denied(err error) (code string, ok bool) {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return "", false
	}
	switch code := api.ErrorCode(); code {
	case "AccessDenied", "AccessDeniedException", "AuthorizationError", "KMS.AccessDeniedException":
		return code, true
	}
	return "", false
}
