package limits

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// DynamoAPI is the part of the DynamoDB client the table's Store calls.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// The table's schema, which `watchbot template --limits` renders: one key, KeyAttribute, a
// string, and time to live on TTLAttribute. docs/limits.md shows the items.
const (
	// KeyAttribute is the table's partition key, its only key attribute: a ledger's name,
	// or FleetItem.
	KeyAttribute = "pk"
	// KeyAttributeType is KeyAttribute's DynamoDB type: a string.
	KeyAttributeType = "S"
	// TTLAttribute holds when an item may be deleted, in seconds since the Unix epoch: a
	// day after its last write. Nothing in an item counts by then.
	TTLAttribute = "expires_at"
	// FleetItem is the key of the item holding the pause and the live tasks.
	FleetItem = "fleet"
)

// The other attributes.
const (
	attrVersion = "v"           // a ledger's version
	attrHolds   = "holds"       // a ledger's holds: holder → {n, until}
	attrN       = "n"           // units of a hold
	attrUntil   = "until"       // a hold's end, epoch milliseconds
	attrPause   = "pause_until" // the fleet's pause end, epoch milliseconds
	attrTasks   = "tasks"       // the live tasks: task → end of its last beat, epoch milliseconds
)

// keepFor is how long an item outlives its last write before time to live may delete it.
const keepFor = 24 * time.Hour

// TableDefinition is the CreateTable request of a limits table named name: KeyAttribute as
// its only key, on-demand billing. Time to live is turned on apart, on TTLAttribute.
func TableDefinition(name string) *dynamodb.CreateTableInput {
	return ddbattr.HashKeyTable(name, KeyAttribute)
}

// How the limiter's DynamoDB client tries a call (ClientOptions).
const (
	callAttempts   = 3
	callMaxBackoff = 200 * time.Millisecond
)

// ClientOptions tune the DynamoDB client of NewDynamoStore: each call is tried up to 3 times,
// at most 200 ms apart. Run retries a failed call itself and falls back to the task's share
// after FallbackAfter without a success; the SDK's usual backoff (up to 20 s between tries)
// would spend that time, and more, waiting on one call.
func ClientOptions(o *dynamodb.Options) {
	if o.Retryer == nil {
		o.Retryer = retry.NewStandard()
	}
	o.RetryMaxAttempts = callAttempts
	o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, callMaxBackoff)
}

// dynamoStore is the Store of a DynamoDB table.
type dynamoStore struct {
	api   DynamoAPI
	table string
	now   func() time.Time
}

// NewDynamoStore returns the Store of table, reached through api.
func NewDynamoStore(api DynamoAPI, table string) Store {
	return &dynamoStore{api: api, table: table, now: time.Now}
}

func (s *dynamoStore) key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{KeyAttribute: ddbattr.S(pk)}
}

// Ledger reads a ledger with a strongly consistent read: a stale copy would only cost a
// failed write, but a fresh one saves it.
func (s *dynamoStore) Ledger(ctx context.Context, name string) (Ledger, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: s.key(name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Ledger{}, s.wrap("read "+name, err)
	}
	return ledgerOf(out.Item)
}

// PutLedger writes the whole ledger on condition of its version.
func (s *dynamoStore) PutLedger(ctx context.Context, name string, prev int64, l Ledger) error {
	holds := make(map[string]types.AttributeValue, len(l.Holds))
	for holder, h := range l.Holds {
		holds[holder] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			attrN: ddbattr.N(int64(h.N)), attrUntil: ddbattr.N(ceilMillis(h.Until)),
		}}
	}
	in := &dynamodb.PutItemInput{
		TableName: aws.String(s.table),
		Item: map[string]types.AttributeValue{
			KeyAttribute: ddbattr.S(name), attrVersion: ddbattr.N(l.Version), attrHolds: &types.AttributeValueMemberM{Value: holds},
			TTLAttribute: ddbattr.N(s.now().Add(keepFor).Unix()),
		},
		ExpressionAttributeNames: map[string]string{"#pk": KeyAttribute},
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
	}
	if prev != 0 {
		in.ConditionExpression = aws.String("#v = :prev")
		in.ExpressionAttributeNames = map[string]string{"#v": attrVersion}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":prev": ddbattr.N(prev)}
	}
	_, err := s.api.PutItem(ctx, in)
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return ErrConflict
	}
	return s.wrap("write "+name, err)
}

func (s *dynamoStore) Fleet(ctx context.Context) (Fleet, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: s.key(FleetItem), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Fleet{}, s.wrap("read the fleet item", err)
	}
	return fleetOf(out.Item), nil
}

// Beat sets the task's entry in the map of tasks, and creates the map first when the item
// has none (DynamoDB refuses to set an entry of a map that does not exist).
func (s *dynamoStore) Beat(ctx context.Context, task string, until time.Time, gone []string) (Fleet, error) {
	names := map[string]string{"#tasks": attrTasks, "#me": task, "#exp": TTLAttribute}
	// The fleet item has no time to live: it keeps the operator's pauses and settings while
	// the fleet is scaled to zero. Items written before it did lose theirs here.
	expr := "SET #tasks.#me = :until REMOVE " + strings.Join(append([]string{"#exp"}, removeGone(gone, names)...), ", ")
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: s.key(FleetItem),
		UpdateExpression:         aws.String(expr),
		ExpressionAttributeNames: names,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":until": ddbattr.N(ceilMillis(until)),
		},
		ReturnValues: types.ReturnValueAllNew,
	}
	out, err := s.api.UpdateItem(ctx, in)
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException" {
		_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.table), Key: s.key(FleetItem),
			UpdateExpression:          aws.String("SET #tasks = if_not_exists(#tasks, :empty)"),
			ExpressionAttributeNames:  map[string]string{"#tasks": attrTasks},
			ExpressionAttributeValues: map[string]types.AttributeValue{":empty": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}},
		})
		if err == nil {
			out, err = s.api.UpdateItem(ctx, in)
		}
	}
	if err != nil {
		return Fleet{}, s.wrap("record the task as live", err)
	}
	return fleetOf(out.Attributes), nil
}

func (s *dynamoStore) Leave(ctx context.Context, task string) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: s.key(FleetItem),
		UpdateExpression:         aws.String("REMOVE #tasks.#me"),
		ConditionExpression:      aws.String("attribute_exists(#tasks)"),
		ExpressionAttributeNames: map[string]string{"#tasks": attrTasks, "#me": task},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return nil
	}
	return s.wrap("remove the task", err)
}

// Pause writes the pause's end unless a later one is there.
func (s *dynamoStore) Pause(ctx context.Context, until time.Time) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: s.key(FleetItem),
		UpdateExpression:          aws.String("SET #pause = :until"),
		ConditionExpression:       aws.String("attribute_not_exists(#pause) OR #pause < :until"),
		ExpressionAttributeNames:  map[string]string{"#pause": attrPause},
		ExpressionAttributeValues: map[string]types.AttributeValue{":until": ddbattr.N(ceilMillis(until))},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return nil
	}
	return s.wrap("write the pause", err)
}

// wrap names the operation and the table.
func (s *dynamoStore) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("limits table %s: %s: %w", s.table, op, err)
}

// ledgerOf reads a ledger item; a missing item is version 0.
func ledgerOf(item map[string]types.AttributeValue) (Ledger, error) {
	l := Ledger{Holds: map[string]Hold{}}
	if item == nil {
		return l, nil
	}
	v, err := ddbattr.Int(item, attrVersion)
	if err != nil {
		return Ledger{}, fmt.Errorf("ledger %s: %w", ddbattr.String(item, KeyAttribute), err)
	}
	l.Version = v
	holds, _ := item[attrHolds].(*types.AttributeValueMemberM)
	if holds == nil {
		return l, nil
	}
	for holder, av := range holds.Value {
		m, ok := av.(*types.AttributeValueMemberM)
		if !ok {
			continue
		}
		n, err1 := ddbattr.Int(m.Value, attrN)
		until, err2 := ddbattr.Int(m.Value, attrUntil)
		if err := errors.Join(err1, err2); err != nil {
			return Ledger{}, fmt.Errorf("ledger %s, hold %s: %w", ddbattr.String(item, KeyAttribute), holder, err)
		}
		l.Holds[holder] = Hold{N: int(n), Until: time.UnixMilli(until)}
	}
	return l, nil
}

// fleetOf reads the fleet item; entries it cannot read count as absent.
func fleetOf(item map[string]types.AttributeValue) Fleet {
	f := Fleet{Tasks: map[string]time.Time{}, Control: controlOf(item)}
	if ms, err := ddbattr.Int(item, attrPause); err == nil {
		f.PauseUntil = time.UnixMilli(ms)
	}
	if tasks, ok := item[attrTasks].(*types.AttributeValueMemberM); ok {
		for task := range tasks.Value {
			if ms, err := ddbattr.Int(tasks.Value, task); err == nil {
				f.Tasks[task] = time.UnixMilli(ms)
			}
		}
	}
	return f
}

// ceilMillis is t in epoch milliseconds, rounded up: an end written to the table is never
// earlier than the one decided.
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
