package lambda

import (
	"maps"
	"slices"
	"testing"
)

// Every case of the partial batch response, as Lambda's documentation lists them.
func TestFailures(t *testing.T) {
	ids := map[string]bool{"a": true, "b": true, "c": true}
	for _, tc := range []struct {
		name, response string
		failed         []string
		wholeBatch     bool
	}{
		{name: "empty response", response: ""},
		{name: "blank response", response: " \n"},
		{name: "null response", response: "null"},
		{name: "empty object", response: "{}"},
		{name: "other fields only", response: `{"statusCode":200}`},
		{name: "null list", response: `{"batchItemFailures":null}`},
		{name: "empty list", response: `{"batchItemFailures":[]}`},
		{name: "one failure", response: `{"batchItemFailures":[{"itemIdentifier":"b"}]}`, failed: []string{"b"}},
		{name: "two failures", response: `{"batchItemFailures":[{"itemIdentifier":"a"},{"itemIdentifier":"c"}]}`, failed: []string{"a", "c"}},
		{name: "a failure twice", response: `{"batchItemFailures":[{"itemIdentifier":"a"},{"itemIdentifier":"a"}]}`, failed: []string{"a"}},
		{name: "invalid JSON", response: `{"batchItemFailures":[`, wholeBatch: true},
		{name: "not JSON", response: `ok`, wholeBatch: true},
		{name: "a string", response: `"ok"`, wholeBatch: true},
		{name: "list not an array", response: `{"batchItemFailures":"a"}`, wholeBatch: true},
		{name: "empty itemIdentifier", response: `{"batchItemFailures":[{"itemIdentifier":""}]}`, wholeBatch: true},
		{name: "null itemIdentifier", response: `{"batchItemFailures":[{"itemIdentifier":null}]}`, wholeBatch: true},
		{name: "bad key name", response: `{"batchItemFailures":[{"itemId":"a"}]}`, wholeBatch: true},
		{name: "null item", response: `{"batchItemFailures":[null]}`, wholeBatch: true},
		{name: "identifier not a string", response: `{"batchItemFailures":[{"itemIdentifier":1}]}`, wholeBatch: true},
		{name: "unknown identifier", response: `{"batchItemFailures":[{"itemIdentifier":"a"},{"itemIdentifier":"zz"}]}`, wholeBatch: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed, err := Failures([]byte(tc.response), ids)
			if (err != nil) != tc.wholeBatch {
				t.Fatalf("error %v, want whole batch failed: %v", err, tc.wholeBatch)
			}
			if got := slices.Sorted(maps.Keys(failed)); !slices.Equal(got, tc.failed) {
				t.Errorf("failed %v, want %v", got, tc.failed)
			}
		})
	}
}

func FuzzFailures(f *testing.F) {
	for _, seed := range []string{"", "null", `{"batchItemFailures":[{"itemIdentifier":"a"}]}`, `{"batchItemFailures":[{}]}`, `[1]`} {
		f.Add([]byte(seed))
	}
	ids := map[string]bool{"a": true, "b": true}
	f.Fuzz(func(t *testing.T, response []byte) {
		failed, err := Failures(response, ids)
		if err != nil && failed != nil {
			t.Fatalf("both failures %v and error %v", failed, err)
		}
		for id := range failed {
			if !ids[id] {
				t.Fatalf("failed %q, not in the batch", id)
			}
		}
	})
}

func TestHoldSuccessors(t *testing.T) {
	order := []string{"a1", "b1", "a2", "a3", "b2", "n1"}
	groups := map[string]string{"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B"}
	for _, tc := range []struct {
		name         string
		failed, want []string
	}{
		{name: "none", failed: nil, want: nil},
		{name: "last of its group", failed: []string{"a3"}, want: []string{"a3"}},
		{name: "first holds the group", failed: []string{"a1"}, want: []string{"a1", "a2", "a3"}},
		{name: "middle holds what follows", failed: []string{"a2", "b2"}, want: []string{"a2", "a3", "b2"}},
		{name: "no group holds nothing", failed: []string{"n1"}, want: []string{"n1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed := map[string]bool{}
			for _, id := range tc.failed {
				failed[id] = true
			}
			if got := slices.Sorted(maps.Keys(HoldSuccessors(failed, order, groups))); !slices.Equal(got, tc.want) {
				t.Errorf("failed %v, want %v", got, tc.want)
			}
		})
	}
}
