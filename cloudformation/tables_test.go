package cloudformation

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/progress"
)

// allTables returns every state table a template can add.
func allTables() []StateTable { return Tables(Options{Reduce: true, Dedupe: true, Limits: true}) }

// TestStateTables checks each example's tables: a table, its policy, its environment
// variable, its listen flag and its outputs for every table the options ask for, and none
// of them for the others.
func TestStateTables(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			o := ex.opts()
			tpl := generate(t, o)
			td := resource[*TaskDefinition](t, tpl, ResTaskDefinition, "AWS::ECS::TaskDefinition")
			c := td.ContainerDefinitions[0]
			env := environment(c)
			policies := map[string][]Statement{}
			for _, p := range resource[*Role](t, tpl, ResTaskRole, "AWS::IAM::Role").Policies {
				policies[p.PolicyName] = p.PolicyDocument.Statement
			}
			listen := c.Command[:slices.Index(c.Command, any("--"))]
			enabled := Tables(o)
			// DynamoDB actions come from the tables' policies only (and --extra-policy).
			for name, statements := range policies {
				own := name == "extra" || slices.ContainsFunc(enabled, func(e StateTable) bool { return e.Policy == name })
				for _, s := range statements {
					if !own && slices.ContainsFunc(s.Action, func(a string) bool { return strings.HasPrefix(a, "dynamodb:") }) {
						t.Errorf("policy %s grants DynamoDB actions: %+v", name, s)
					}
				}
			}
			for _, table := range allTables() {
				arn := GetAtt(table.LogicalID, "Arn")
				on := slices.ContainsFunc(enabled, func(e StateTable) bool { return e.LogicalID == table.LogicalID })
				_, hasResource := tpl.Resources[table.LogicalID]
				_, hasPolicy := policies[table.Policy]
				_, hasOutput := tpl.Outputs[table.LogicalID+"Arn"]
				if !on {
					if hasResource || hasPolicy || hasOutput || table.Env != "" && env[table.Env] != nil ||
						table.ListenFlag != "" && slices.Contains(listen, any(table.ListenFlag)) {
						t.Errorf("%s without %s", table.LogicalID, table.Flag)
					}
					continue
				}

				r := tpl.Resources[table.LogicalID]
				if r.DeletionPolicy != "Delete" || r.UpdateReplacePolicy != "Delete" {
					t.Errorf("%s: DeletionPolicy %q, UpdateReplacePolicy %q: its state is disposable", table.LogicalID, r.DeletionPolicy, r.UpdateReplacePolicy)
				}
				want := &DynamoDBTable{AttributeDefinitions: table.AttributeDefinitions, KeySchema: table.KeySchema, BillingMode: "PAY_PER_REQUEST"}
				if table.TTLAttribute != "" {
					want.TimeToLiveSpecification = &TimeToLiveSpecification{AttributeName: table.TTLAttribute, Enabled: true}
				}
				if diff := cmp.Diff(want, resource[*DynamoDBTable](t, tpl, table.LogicalID, "AWS::DynamoDB::Table")); diff != "" {
					t.Errorf("%s (-want +got):\n%s", table.LogicalID, diff)
				}

				wantPolicy := []Statement{{Sid: table.LogicalID, Effect: "Allow", Action: table.Actions, Resource: []any{arn}}}
				if diff := cmp.Diff(wantPolicy, policies[table.Policy]); diff != "" {
					t.Errorf("policy %s (-want +got):\n%s", table.Policy, diff)
				}
				for name, statements := range policies {
					for _, s := range statements {
						if name != table.Policy && slices.ContainsFunc(s.Resource, func(r any) bool { return cmp.Equal(r, arn) }) {
							t.Errorf("policy %s grants %s: %+v", name, table.LogicalID, s)
						}
					}
				}

				if table.Env != "" && !cmp.Equal(env[table.Env], arn) {
					t.Errorf("environment %s = %v, want the ARN of %s", table.Env, env[table.Env], table.LogicalID)
				}
				if table.ListenFlag != "" {
					i := slices.Index(listen, any(table.ListenFlag))
					if i < 0 || i+1 >= len(listen) || !cmp.Equal(listen[i+1], Ref(table.LogicalID)) {
						t.Errorf("listen %v: want %s with the name of %s", listen, table.ListenFlag, table.LogicalID)
					}
				}
				for output, value := range map[string]any{"Name": Ref(table.LogicalID), "Arn": arn} {
					if got := tpl.Outputs[table.LogicalID+output]; !cmp.Equal(got.Value, value) || got.Condition != "" {
						t.Errorf("output %s%s = %+v, want %v", table.LogicalID, output, got, value)
					}
				}
			}
		})
	}
}

// TestStateTablesAreTheirCode checks the tables against the packages that use them: the key
// and TTL attribute are the package's, and every action is a DynamoDB operation of the SDK's
// client.
func TestStateTablesAreTheirCode(t *testing.T) {
	for _, c := range []struct {
		table StateTable
		def   *dynamodb.CreateTableInput
		ttl   string
	}{
		{ProgressTable, progress.TableDefinition("jobs"), progress.TTLAttribute},
		{DedupeTable, dedupe.TableDefinition("keys"), dedupe.TTLAttribute},
		{LimitsTable, limits.TableDefinition("limits"), limits.TTLAttribute},
	} {
		id := c.table.LogicalID
		if diff := cmp.Diff(attributeDefinitions(c.def), c.table.AttributeDefinitions); diff != "" || len(c.def.KeySchema) == 0 {
			t.Errorf("%s's attributes are not its package's TableDefinition's (-want +got):\n%s", id, diff)
		}
		if diff := cmp.Diff(keySchema(c.def), c.table.KeySchema); diff != "" {
			t.Errorf("%s's key is not its package's TableDefinition's (-want +got):\n%s", id, diff)
		}
		if c.table.TTLAttribute != c.ttl {
			t.Errorf("%s: TTL attribute %q, want %q", id, c.table.TTLAttribute, c.ttl)
		}
		// The policies grant the table's ARN alone, which covers no index.
		if len(c.def.GlobalSecondaryIndexes)+len(c.def.LocalSecondaryIndexes) > 0 {
			t.Errorf("%s's TableDefinition has an index: render it and grant its ARN (table/NAME/index/*) too", id)
		}
	}
	if !slices.Equal(DedupeTable.KeySchema, []KeySchemaElement{{AttributeName: dedupe.KeyAttribute, KeyType: "HASH"}}) ||
		!slices.Equal(DedupeTable.AttributeDefinitions, []AttributeDefinition{{AttributeName: dedupe.KeyAttribute, AttributeType: dedupe.KeyAttributeType}}) {
		t.Errorf("DedupeTable's key is not dedupe.KeyAttribute alone: %+v %+v", DedupeTable.KeySchema, DedupeTable.AttributeDefinitions)
	}

	client := reflect.TypeFor[*dynamodb.Client]()
	ctx := reflect.TypeFor[context.Context]()
	for _, table := range allTables() {
		if len(table.Actions) == 0 {
			t.Errorf("%s: no actions", table.LogicalID)
		}
		if !slices.IsSorted(table.Actions) {
			t.Errorf("%s: actions %v are not sorted", table.LogicalID, table.Actions)
		}
		for _, a := range table.Actions {
			op, ok := strings.CutPrefix(a, "dynamodb:")
			m, found := client.MethodByName(op)
			// A method func(client, ctx, *OpInput, ...func(*Options)) (*OpOutput, error) is an
			// operation, and its IAM action is named after it.
			if !ok || !found || m.Type.NumIn() != 4 || m.Type.In(1) != ctx || m.Type.In(2).Kind() != reflect.Pointer ||
				m.Type.In(2).Elem().Name() != op+"Input" || m.Type.In(2).Elem().PkgPath() != client.Elem().PkgPath() {
				t.Errorf("%s: %s is not a DynamoDB operation of *dynamodb.Client", table.LogicalID, a)
			}
		}
	}
}

func TestDynamoDBActions(t *testing.T) {
	type api interface {
		UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
		DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	}
	want := []string{"dynamodb:DescribeTable", "dynamodb:UpdateItem"}
	if got := dynamoDBActions(reflect.TypeFor[api]()); !slices.Equal(got, want) {
		t.Errorf("dynamoDBActions = %v, want %v", got, want)
	}
}

// TestStateTablesDocs checks that the table of docs/template.md's "State tables" gives each
// table's key, TTL attribute, policy and actions as the code does.
func TestStateTablesDocs(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "docs", "template.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range allTables() {
		t.Run(table.LogicalID, func(t *testing.T) {
			start := "\n| `" + table.Flag + "` | `" + table.LogicalID + "` |"
			i := strings.Index(string(page), start)
			if i < 0 {
				t.Fatalf("docs/template.md has no row starting %q", start[1:])
			}
			row, _, _ := strings.Cut(string(page[i+1:]), "\n")
			cells := strings.Split(row, " | ")
			if len(cells) != 7 {
				t.Fatalf("row %q has %d cells, want 7", row, len(cells))
			}
			var key []string
			for _, k := range table.KeySchema {
				typ := ""
				for _, a := range table.AttributeDefinitions {
					if a.AttributeName == k.AttributeName {
						typ = a.AttributeType
					}
				}
				part := map[string]string{"HASH": "partition", "RANGE": "sort"}[k.KeyType]
				key = append(key, "`"+k.AttributeName+"` ("+typ+", "+part+")")
			}
			ttl := "none"
			if table.TTLAttribute != "" {
				ttl = "`" + table.TTLAttribute + "`"
			}
			// The first action in full, the others without "dynamodb:".
			actions := "`" + table.Actions[0] + "`"
			for _, a := range table.Actions[1:] {
				actions += ", `" + strings.TrimPrefix(a, "dynamodb:") + "`"
			}
			for name, c := range map[string]struct{ got, want string }{
				"key":    {cells[3], strings.Join(key, ", ")},
				"TTL":    {cells[4], ttl},
				"policy": {strings.TrimSuffix(cells[6], " |"), "`" + table.Policy + "`: " + actions},
			} {
				if c.got != c.want {
					t.Errorf("%s: docs say %q, the code %q", name, c.got, c.want)
				}
			}
		})
	}
}
