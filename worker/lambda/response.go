package lambda

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Failures reads a function's response to an SQS event as Lambda does with
// ReportBatchItemFailures (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html):
// it returns the records to retry, by message id, the others being done. A null or empty
// response, or a null or empty batchItemFailures, is success for all. An error fails the
// whole batch: a response that is not JSON, an item whose itemIdentifier is missing, null or
// empty, or one that names no record of ids.
func Failures(response []byte, ids map[string]bool) (map[string]bool, error) {
	response = bytes.TrimSpace(response)
	if len(response) == 0 {
		return nil, nil
	}
	var resp *struct {
		Failures *[]*struct {
			ID *string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if err := json.Unmarshal(response, &resp); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fmt.Errorf("the response is not a batch response: %s is %s", orTop(typeErr.Field), typeErr.Value)
		}
		return nil, fmt.Errorf("the response is not JSON: %w", err)
	}
	if resp == nil || resp.Failures == nil {
		return nil, nil
	}
	failed := map[string]bool{}
	for i, f := range *resp.Failures {
		switch {
		case f == nil || f.ID == nil:
			return nil, fmt.Errorf("batchItemFailures[%d] has no itemIdentifier", i)
		case *f.ID == "":
			return nil, fmt.Errorf("batchItemFailures[%d] has an empty itemIdentifier", i)
		case !ids[*f.ID]:
			return nil, fmt.Errorf("batchItemFailures[%d] names %q, which is not in the batch", i, *f.ID)
		}
		failed[*f.ID] = true
	}
	return failed, nil
}

func orTop(field string) string {
	if field == "" {
		return "the response"
	}
	return field
}

// HoldSuccessors returns failed with, in each FIFO group, every record after a failed one
// added: a group's records are handled in order, so a record whose predecessor runs again
// runs again after it. order is the records' message ids as the event held them, groups their
// MessageGroupId ("" outside FIFO, which holds nothing).
func HoldSuccessors(failed map[string]bool, order []string, groups map[string]string) map[string]bool {
	held := map[string]bool{}
	for _, id := range order {
		g := groups[id]
		if g != "" && held[g] {
			if failed == nil {
				failed = map[string]bool{}
			}
			failed[id] = true
		}
		if failed[id] && g != "" {
			held[g] = true
		}
	}
	return failed
}
