package cloudformation

import (
	"reflect"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/progress"
)

// StateTable is a DynamoDB table that holds the state of one of watchbot's optional features.
// Its key, its TTL attribute and the actions its code calls are values of the package that
// reads and writes it, so the template cannot drift from the code.
//
// The state is disposable: a job's progress or a message's dedupe mark means nothing once
// the stack's queue is gone, and items expire by TTL. So CloudFormation names the table (a
// change of key is then a plain replacement), billing is on demand (no capacity to plan for
// bursts of jobs, nothing paid while idle), and the table is deleted with the stack, or when
// replaced.
type StateTable struct {
	// LogicalID is the table's logical id; its outputs are LogicalID+"Name" and
	// LogicalID+"Arn".
	LogicalID string
	// Flag is the `watchbot template` flag that adds the table.
	Flag string
	// Holds says what the table holds, in the outputs' descriptions.
	Holds string
	// AttributeDefinitions and KeySchema are the table's key.
	AttributeDefinitions []AttributeDefinition
	KeySchema            []KeySchemaElement
	// TTLAttribute is the attribute in which the code writes an item's expiry (epoch
	// seconds); DynamoDB deletes expired items.
	TTLAttribute string
	// Actions are the IAM actions the code calls on the table, granted on the table's ARN
	// alone (it has no index). Policy names the task role's inline policy granting them.
	Actions []string
	Policy  string
	// Env is the container environment variable the template sets to the table's ARN, and
	// ListenFlag the listen flag it passes the table's name with; either may be empty.
	Env, ListenFlag string
	// Reserved are the environment variables through which the code finds the table, which
	// --env must not set along with Flag (the template's table would win, or be ignored).
	Reserved []string
	// OperatorPolicy, when set, is the logical id of a managed policy granting
	// OperatorActions on the table, for operators' roles to attach; its ARN is the output
	// OperatorPolicy+"Arn". OperatorUse says what it is for.
	OperatorPolicy  string
	OperatorActions []string
	OperatorUse     string
}

// ProgressTable is the table of reduce mode (--reduce): `watchbot progress` (package
// progress) tracks the parts of map-reduce jobs in it. Like Mapbox Watchbot's reduce mode,
// the container gets the table's ARN in $ProgressTable, which `watchbot progress` reads
// (before $WATCHBOT_PROGRESS_TABLE), and the task role a policy named watchbot-progress.
var ProgressTable = StateTable{
	LogicalID:            "ProgressTable",
	Flag:                 "--reduce",
	Holds:                "the progress of map-reduce jobs (watchbot progress)",
	AttributeDefinitions: attributeDefinitions(progress.TableDefinition("")),
	KeySchema:            keySchema(progress.TableDefinition("")),
	TTLAttribute:         progress.TTLAttribute,
	Actions:              dynamoDBActions(reflect.TypeFor[progress.API]()),
	Policy:               "watchbot-progress",
	Env:                  "ProgressTable",
	Reserved:             []string{"ProgressTable", "WATCHBOT_PROGRESS_TABLE"},
}

// DedupeTable is the table of duplicate suppression (--dedupe): listen (package dedupe)
// keeps a record per message key in it, passed with --dedupe-table. Its records expire by
// TTL once the key need no longer be remembered (listen's --dedupe-ttl).
var DedupeTable = StateTable{
	LogicalID:            "DedupeTable",
	Flag:                 "--dedupe",
	Holds:                "duplicate suppression (watchbot listen --dedupe-table)",
	AttributeDefinitions: attributeDefinitions(dedupe.TableDefinition("")),
	KeySchema:            keySchema(dedupe.TableDefinition("")),
	TTLAttribute:         dedupe.TTLAttribute,
	Actions:              dynamoDBActions(reflect.TypeFor[dedupe.API]()),
	Policy:               "watchbot-dedupe",
	ListenFlag:           "--dedupe-table",
	Reserved:             []string{"WATCHBOT_DEDUPE_TABLE"},
}

// LimitsTable is the table of the limits (--limits): listen (package limits) keeps the
// fleet's tokens, slot leases, live tasks and pause in it, passed with --limits-table. Its
// items expire by TTL once no task renews them.
var LimitsTable = StateTable{
	LogicalID:            "LimitsTable",
	Flag:                 "--limits",
	Holds:                "the fleet's limits and pauses (watchbot listen --limits-table)",
	AttributeDefinitions: attributeDefinitions(limits.TableDefinition("")),
	KeySchema:            keySchema(limits.TableDefinition("")),
	TTLAttribute:         limits.TTLAttribute,
	Actions:              dynamoDBActions(reflect.TypeFor[limits.DynamoAPI]()),
	Policy:               "watchbot-limits",
	ListenFlag:           "--limits-table",
	Reserved:             []string{"WATCHBOT_LIMITS_TABLE"},
	OperatorPolicy:       "FleetOperatorPolicy",
	OperatorActions:      dynamoDBActions(reflect.TypeFor[limits.OperatorAPI]()),
	OperatorUse:          "steer the fleet through the limits table (watchbot fleet pause, resume, set and status; watchbot status --limits-table)",
}

// Tables returns the state tables o adds to the stack.
func Tables(o Options) []StateTable {
	var out []StateTable
	if o.Reduce {
		out = append(out, ProgressTable)
	}
	if o.Dedupe {
		out = append(out, DedupeTable)
	}
	if o.Limits {
		out = append(out, LimitsTable)
	}
	return out
}

// dynamoDBActions returns the IAM actions of the calls in api, an interface type holding
// methods of *dynamodb.Client, as a package declares the part of the client it calls (the
// compiler checks that the client satisfies it). Each method is a DynamoDB operation, whose
// action is "dynamodb:" and its name. They are sorted: reflect lists methods by name.
func dynamoDBActions(api reflect.Type) []string {
	actions := make([]string, api.NumMethod())
	for i := range actions {
		actions[i] = "dynamodb:" + api.Method(i).Name
	}
	return actions
}

func attributeDefinitions(in *dynamodb.CreateTableInput) []AttributeDefinition {
	out := make([]AttributeDefinition, len(in.AttributeDefinitions))
	for i, a := range in.AttributeDefinitions {
		out[i] = AttributeDefinition{AttributeName: deref(a.AttributeName), AttributeType: string(a.AttributeType)}
	}
	return out
}

func keySchema(in *dynamodb.CreateTableInput) []KeySchemaElement {
	out := make([]KeySchemaElement, len(in.KeySchema))
	for i, k := range in.KeySchema {
		out[i] = KeySchemaElement{AttributeName: deref(k.AttributeName), KeyType: string(k.KeyType)}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// tables adds the state tables. Their policies are added by roles, their environment by
// task, their listen flags by ListenArgs.
func (g *generator) tables() {
	for _, t := range Tables(g.o) {
		p := &DynamoDBTable{
			AttributeDefinitions: t.AttributeDefinitions,
			KeySchema:            t.KeySchema,
			BillingMode:          "PAY_PER_REQUEST",
		}
		if t.TTLAttribute != "" {
			p.TimeToLiveSpecification = &TimeToLiveSpecification{AttributeName: t.TTLAttribute, Enabled: true}
		}
		g.add(t.LogicalID, Resource{Type: "AWS::DynamoDB::Table", DeletionPolicy: "Delete", UpdateReplacePolicy: "Delete", Properties: p})
		if t.OperatorPolicy != "" {
			g.add(t.OperatorPolicy, Resource{Type: "AWS::IAM::ManagedPolicy", Properties: &ManagedPolicy{
				Description: "Lets an operator " + t.OperatorUse + ". Attach it to the operator's role or user.",
				PolicyDocument: PolicyDocument{Version: policyVersion, Statement: []Statement{
					{Sid: "Steer" + t.LogicalID, Effect: "Allow", Action: t.OperatorActions, Resource: []any{GetAtt(t.LogicalID, "Arn")}},
				}},
			}})
		}
	}
}

// tablePolicies returns one inline policy per state table, granting its actions on it.
func (g *generator) tablePolicies() []RolePolicy {
	var out []RolePolicy
	for _, t := range Tables(g.o) {
		out = append(out, RolePolicy{PolicyName: t.Policy, PolicyDocument: PolicyDocument{Version: policyVersion, Statement: []Statement{
			{Sid: t.LogicalID, Effect: "Allow", Action: t.Actions, Resource: []any{GetAtt(t.LogicalID, "Arn")}},
		}}})
	}
	return out
}

// tableOutputs adds each state table's name and ARN to outputs.
func (g *generator) tableOutputs(outputs map[string]Output) {
	for _, t := range Tables(g.o) {
		outputs[t.LogicalID+"Name"] = Output{Description: "Name of the DynamoDB table of " + t.Holds, Value: Ref(t.LogicalID)}
		outputs[t.LogicalID+"Arn"] = Output{Description: "ARN of the DynamoDB table of " + t.Holds, Value: GetAtt(t.LogicalID, "Arn")}
		if t.OperatorPolicy != "" {
			outputs[t.OperatorPolicy+"Arn"] = Output{Description: "ARN of the managed policy that lets an operator " + t.OperatorUse, Value: Ref(t.OperatorPolicy)}
		}
	}
}
