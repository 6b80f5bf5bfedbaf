package progress

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// Completion is what CompletePart reports.
type Completion struct {
	Job  string `json:"job"`
	Part int64  `json:"part"`
	// Complete is true for the call that completed the job, and for no other call: the caller
	// is to send the reduce step. watchbot-progress's complete-part prints it.
	Complete bool `json:"complete"`
	// Duplicate is true when the part was already complete when this call first read it: a
	// duplicate delivery, or a retry of a call that got that far before.
	Duplicate bool `json:"duplicate"`
}

// CompletePart marks part (1..total) of job complete and reports whether this call completed
// the job. It takes two steps, each one conditional write retried until it wins its race:
//
//  1. set the part's bit in its shard item, unless it is set already (a duplicate);
//  2. count the shard: if the shard's bits outnumber the count the job item holds for it,
//     raise that count to the bits and lower remaining by the difference, on condition that
//     the count is still the one read. The call whose write brings remaining to 0 completed
//     the job.
//
// Every call runs step 2, duplicates included, so a call that stopped between the steps is
// made good by the next call for its shard, usually its own retry. Calls: one BatchGetItem
// (the job item and the shard), one UpdateItem per step, and a GetItem for each race lost.
// Why exactly one call sees true: docs/map-reduce.md#exactly-once.
func (s *Store) CompletePart(ctx context.Context, job string, part int64) (Completion, error) {
	c := Completion{Job: job, Part: part}
	if err := ValidateJobID(job); err != nil {
		return c, err
	}
	if part < 1 || part > MaxParts {
		return c, fmt.Errorf("part %d is outside 1..%d", part, MaxParts)
	}
	shard, bit := locate(part)
	items, err := s.read(ctx, "complete-part", job, jobItem, shardKey(shard))
	if err != nil {
		return c, err
	}
	j, err := s.decodeJob(job, items[jobItem])
	if err != nil {
		return c, err
	}
	if part > j.total {
		return c, fmt.Errorf("part %d of job %s is outside 1..%d (its total)", part, strconv.Quote(job), j.total)
	}
	sh := decodeShard(items[shardKey(shard)])
	token := s.token()
	if c.Duplicate = sh.bits.has(bit); !c.Duplicate {
		if sh, err = s.setBit(ctx, job, shard, bit, sh); err != nil {
			return c, err
		}
	}
	c.Complete, err = s.count(ctx, job, shard, int64(sh.bits.count()), j, token)
	return c, err
}

// shardState is what a shard item says; a missing item is the zero shardState.
type shardState struct {
	bits    bitmap
	version int64 // 0: no item yet
}

func decodeShard(item map[string]types.AttributeValue) shardState {
	v, _ := ddbattr.Int(item, attrVersion)
	return shardState{bits: bytesOf(item, attrBits), version: v}
}

// setBit sets bit in shard (step 1), given the shard as last read, and returns the shard as
// written, or as read once the bit is found set (the SDK retried a write whose answer was
// lost, or another call completed the same part).
func (s *Store) setBit(ctx context.Context, job string, shard, bit int, sh shardState) (shardState, error) {
	for attempt := 1; ; attempt++ {
		next := shardState{bits: sh.bits.with(bit), version: sh.version + 1}
		cond := "#v = :v"
		values := map[string]types.AttributeValue{
			":b": &types.AttributeValueMemberB{Value: next.bits}, ":nv": ddbattr.N(next.version), ":v": ddbattr.N(sh.version),
		}
		if sh.version == 0 {
			cond = "attribute_not_exists(#v)"
			delete(values, ":v")
		}
		_, err := s.client.UpdateItem(ctx, s.expiring(&dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       key(job, shardKey(shard)),
			UpdateExpression:          aws.String("SET #b = :b, #v = :nv"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  map[string]string{"#b": attrBits, "#v": attrVersion},
			ExpressionAttributeValues: values,
		}))
		if err == nil {
			return next, nil
		}
		if !isConflict(err) {
			return sh, s.wrap("complete-part: set the part's bit", job, err)
		}
		if sh, err = s.readShard(ctx, job, shard); err != nil {
			return sh, err
		}
		if sh.bits.has(bit) {
			return sh, nil
		}
		if err := s.retryAfter(ctx, "set the part's bit", job, attempt); err != nil {
			return sh, err
		}
	}
}

// count brings the job item's count for shard up to bits, the number of bits the shard had
// after this call's bit was set (step 2), given the job item as last read. It reports whether
// its write brought remaining to 0. Each write carries token, so that a write that took effect
// but whose answer was lost (the SDK's retry then finds the condition false) is recognised.
func (s *Store) count(ctx context.Context, job string, shard int, bits int64, j jobState, token string) (bool, error) {
	for attempt := 1; ; attempt++ {
		counted := j.counted[shard]
		if counted >= bits {
			// Another call counted this shard at or beyond this call's bit.
			return false, nil
		}
		slot := fmt.Sprintf("#c[%d]", shard)
		out, err := s.client.UpdateItem(ctx, s.expiring(&dynamodb.UpdateItemInput{
			TableName:                aws.String(s.table),
			Key:                      key(job, jobItem),
			UpdateExpression:         aws.String("SET " + slot + " = :n, #r = #r - :d, #w = :w"),
			ConditionExpression:      aws.String(slot + " = :o"),
			ExpressionAttributeNames: map[string]string{"#c": attrCounted, "#r": attrRemaining, "#w": attrWriter},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":n": ddbattr.N(bits), ":o": ddbattr.N(counted), ":d": ddbattr.N(bits - counted), ":w": ddbattr.S(token),
			},
			ReturnValues: types.ReturnValueUpdatedNew,
		}))
		if err == nil {
			remaining, err := ddbattr.Int(out.Attributes, attrRemaining)
			if err != nil {
				return false, fmt.Errorf("complete-part %s in table %s: the count's answer: %w", strconv.Quote(job), s.table, err)
			}
			return remaining == 0, nil
		}
		if !isConflict(err) {
			return false, s.wrap("complete-part: count the part", job, err)
		}
		if j, err = s.readJob(ctx, job); err != nil {
			return false, err
		}
		if j.writer == token {
			// This call's write took effect and none has followed it.
			return j.remaining == 0, nil
		}
		if err := s.retryAfter(ctx, "count the part", job, attempt); err != nil {
			return false, err
		}
	}
}

// retryAfter waits before the next attempt of step after attempt lost races, and gives up
// after maxConflicts.
func (s *Store) retryAfter(ctx context.Context, step, job string, attempt int) error {
	if attempt >= maxConflicts {
		return fmt.Errorf("complete-part %s in table %s: %s: lost %d races to other calls in a row; try again",
			strconv.Quote(job), s.table, step, attempt)
	}
	return s.pause(ctx, attempt)
}

// readShard reads shard of job with a strongly consistent read.
func (s *Store) readShard(ctx context.Context, job string, shard int) (shardState, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(job, shardKey(shard)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return shardState{}, s.wrap("read shard", job, err)
	}
	return decodeShard(out.Item), nil
}

// maxUnprocessed bounds the rounds of a BatchGetItem whose keys come back unprocessed
// (DynamoDB's answer to throttling inside a batch).
const maxUnprocessed = 10

// read reads items of job (sort keys) with one strongly consistent BatchGetItem, for op, and
// returns those that exist by sort key.
func (s *Store) read(ctx context.Context, op, job string, items ...string) (map[string]map[string]types.AttributeValue, error) {
	keys := make([]map[string]types.AttributeValue, len(items))
	for i, it := range items {
		keys[i] = key(job, it)
	}
	pending := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	found := map[string]map[string]types.AttributeValue{}
	for round := 1; len(pending) > 0; round++ {
		out, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: pending})
		if err != nil {
			return nil, s.wrap(op, job, err)
		}
		for _, item := range out.Responses[s.table] {
			found[ddbattr.String(item, KeyItem)] = item
		}
		pending = out.UnprocessedKeys
		if len(pending) > 0 && round >= maxUnprocessed {
			return nil, s.wrap(op, job, fmt.Errorf("DynamoDB left keys unprocessed %d times in a row (throttled)", round))
		}
		if len(pending) > 0 {
			if err := s.pause(ctx, round); err != nil {
				return nil, err
			}
		}
	}
	return found, nil
}
