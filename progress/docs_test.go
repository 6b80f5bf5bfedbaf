package progress

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// docs/map-reduce.md gives the table as CloudFormation and the limits as numbers: they must be
// TableDefinition's and the constants'.
func TestDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/map-reduce.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	block := regexp.MustCompile("(?s)```yaml\n(ProgressTable:.*?)```").FindStringSubmatch(page)
	if block == nil {
		t.Fatal("docs/map-reduce.md has no ```yaml block with the ProgressTable resource")
	}
	var doc struct {
		ProgressTable struct {
			Type       string
			Properties struct {
				BillingMode             string
				AttributeDefinitions    []struct{ AttributeName, AttributeType string }
				KeySchema               []struct{ AttributeName, KeyType string }
				TimeToLiveSpecification struct {
					AttributeName string
					Enabled       bool
				}
			}
		}
	}
	if err := yaml.UnmarshalStrict([]byte(block[1]), &doc); err != nil {
		t.Fatal(err)
	}
	def := TableDefinition("t")
	type pair struct{ Name, Type string }
	var gotAttrs, wantAttrs, gotKeys, wantKeys []pair
	for _, a := range doc.ProgressTable.Properties.AttributeDefinitions {
		gotAttrs = append(gotAttrs, pair{a.AttributeName, a.AttributeType})
	}
	for _, a := range def.AttributeDefinitions {
		wantAttrs = append(wantAttrs, pair{*a.AttributeName, string(a.AttributeType)})
	}
	for _, k := range doc.ProgressTable.Properties.KeySchema {
		gotKeys = append(gotKeys, pair{k.AttributeName, k.KeyType})
	}
	for _, k := range def.KeySchema {
		wantKeys = append(wantKeys, pair{*k.AttributeName, string(k.KeyType)})
	}
	if diff := cmp.Diff(wantAttrs, gotAttrs); diff != "" {
		t.Errorf("AttributeDefinitions differ (-code +docs):\n%s", diff)
	}
	if diff := cmp.Diff(wantKeys, gotKeys); diff != "" {
		t.Errorf("KeySchema differs (-code +docs):\n%s", diff)
	}
	if got := doc.ProgressTable.Properties.BillingMode; got != string(def.BillingMode) || doc.ProgressTable.Type != "AWS::DynamoDB::Table" {
		t.Errorf("the resource is a %s billed %s, want an AWS::DynamoDB::Table billed %s", doc.ProgressTable.Type, got, def.BillingMode)
	}
	if ttl := doc.ProgressTable.Properties.TimeToLiveSpecification; ttl.AttributeName != TTLAttribute || !ttl.Enabled {
		t.Errorf("TimeToLiveSpecification %+v, want %s enabled", ttl, TTLAttribute)
	}
	if DefaultTTL != 720*time.Hour || !strings.Contains(page, "720h, 30 days, by default") {
		t.Error("the default --ttl changed: update docs/map-reduce.md and this test")
	}
	for _, want := range []string{
		"| parts of a job | 1 to 10,000,000 |",
		"| job id | 1 to 1,024 bytes of UTF-8 |",
		"| metadata | one JSON document of up to 256 KiB",
		"| reason | 1 byte to 32 KiB |",
		"| 10,000,000 | 2,464 |",
		"A shard holds up to 4,096 parts",
		"Consecutive parts go to 32 different shards",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("docs/map-reduce.md lacks %q", want)
		}
	}
	if MaxParts != 10_000_000 || MaxJobIDBytes != 1024 || MaxMetadataBytes != 256<<10 || MaxReasonBytes != 32<<10 ||
		shardCount(MaxParts) != 2464 || shardBits != 4096 || stripes != 32 {
		t.Error("a limit changed: update docs/map-reduce.md's numbers and this test")
	}
}
