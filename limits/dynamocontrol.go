package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// The control's attributes in the fleet item, and the task records' items.
const (
	attrControl        = "control"   // the operator's Control, as JSON
	attrControlVersion = "control_v" // its Version, for the write's condition
	attrRecord         = "record"    // a task record, as JSON
	// TaskItemPrefix and a task's id are the key of the task's record.
	TaskItemPrefix = "task:"
)

// PutControl writes the control on condition that its version is still prev.
func (s *dynamoStore) PutControl(ctx context.Context, prev int64, c Control) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: s.key(FleetItem),
		UpdateExpression:         aws.String("SET #c = :c, #cv = :v"),
		ConditionExpression:      aws.String("#cv = :prev"),
		ExpressionAttributeNames: map[string]string{"#c": attrControl, "#cv": attrControlVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":c": ddbattr.S(string(raw)), ":v": ddbattr.N(c.Version), ":prev": ddbattr.N(prev),
		},
	}
	if prev == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(#cv)")
		delete(in.ExpressionAttributeValues, ":prev")
	}
	_, err = s.api.UpdateItem(ctx, in)
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return ErrConflict
	}
	return s.wrap("write the fleet's control", err)
}

// PutTask writes the task's record, which time to live deletes a day after its last write.
func (s *dynamoStore) PutTask(ctx context.Context, r TaskRecord) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: map[string]types.AttributeValue{
		KeyAttribute: ddbattr.S(TaskItemPrefix + r.Task), attrRecord: ddbattr.S(string(raw)),
		TTLAttribute: ddbattr.N(s.now().Add(keepFor).Unix()),
	}})
	return s.wrap("record the task", err)
}

// Task reads a task's record with a strongly consistent read: a command waits on it.
func (s *dynamoStore) Task(ctx context.Context, task string) (TaskRecord, bool, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: s.key(TaskItemPrefix + task), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return TaskRecord{}, false, s.wrap("read task "+task, err)
	}
	raw := ddbattr.String(out.Item, attrRecord)
	if raw == "" {
		return TaskRecord{}, false, nil
	}
	var r TaskRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return TaskRecord{}, false, fmt.Errorf("limits table %s: task %s: %w", s.table, task, err)
	}
	return r, true, nil
}

// controlOf reads the control of the fleet item; one it cannot read is none, with version
// the stored one, so that the next write replaces it.
func controlOf(item map[string]types.AttributeValue) Control {
	var c Control
	if raw := ddbattr.String(item, attrControl); raw != "" && json.Unmarshal([]byte(raw), &c) == nil {
		return c
	}
	if v, err := ddbattr.Int(item, attrControlVersion); err == nil {
		return Control{Version: v}
	}
	return Control{}
}

// removeGone is the REMOVE clause of the tasks in gone, their names added to names.
func removeGone(gone []string, names map[string]string) []string {
	var out []string
	for i, g := range gone {
		n := "#g" + strconv.Itoa(i)
		names[n] = g
		out = append(out, "#tasks."+n)
	}
	return out
}

// OperatorAPI is the part of the DynamoDB client that an operator's commands call on the
// table (`watchbot fleet`, `watchbot status --limits-table`): reads of the fleet item, the
// task records and the ledgers, and the update that writes the control. The template's
// fleet operator policy grants these actions and no other.
type OperatorAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ OperatorAPI = (*dynamodb.Client)(nil)

// NewOperatorStore returns the Store of table for an operator's commands, reached through
// api: Steer, ReadTasks, Await and ReadUse need no more than OperatorAPI.
func NewOperatorStore(api OperatorAPI, table string) Store {
	return NewDynamoStore(operatorOnly{api}, table)
}

// operatorOnly is an OperatorAPI as a DynamoAPI: no operator's call writes a whole item.
type operatorOnly struct{ OperatorAPI }

func (operatorOnly) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, errors.New("an operator's command writes no whole item (limits.OperatorAPI)")
}
