package testenv

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/progress"
)

var update = flag.Bool("update", false, "rewrite local-tables.json from the tables' definitions")

// TestLocalTables keeps local-tables.json, the tables scripts/local-sqs creates on the DynamoDB
// emulator, the JSON of the packages' own CreateTable requests, so that the emulator's tables
// cannot drift from the ones listen and watchbot progress check; -update rewrites it.
func TestLocalTables(t *testing.T) {
	var tables []map[string]any
	for _, def := range []*dynamodb.CreateTableInput{
		dedupe.TableDefinition("watchbot-dedupe"),
		limits.TableDefinition("watchbot-limits"),
		progress.TableDefinition("watchbot-progress"),
	} {
		tables = append(tables, request(t, def))
	}
	want, err := json.MarshalIndent(tables, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	const path = "local-tables.json"
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale; rewrite it with go test ./internal/testing/testenv -run TestLocalTables -update\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// request is def as the DynamoDB API takes it: the SDK's field names, which are the API's,
// without the fields left unset (nil, or an enum's empty string).
func request(t *testing.T, def *dynamodb.CreateTableInput) map[string]any {
	t.Helper()
	b, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if v == nil || v == "" {
			delete(m, k)
		}
	}
	return m
}
