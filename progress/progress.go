// Package progress tracks the parts of map-reduce jobs in a DynamoDB table, behind `watchbot
// progress`, a drop-in for Mapbox Watchbot's watchbot-progress CLI. The map step sets a job's
// total number of parts, every part's worker completes its part, and the one call that
// completes the job, and no other, is told so: across duplicate deliveries of a part, concurrent
// calls, and a crash between any two writes of a call followed by its retry. It uses
// conditional writes only (no transactions) and keeps jobs of millions of parts within
// DynamoDB's item size limit. The table layout, the algorithm, why it is exactly once, its
// costs and limits: docs/map-reduce.md.
package progress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/backoff"

	"github.com/watchbot/watchbot/internal/ddbattr"
	"github.com/watchbot/watchbot/internal/setting"
)

// API is the part of the DynamoDB client this package calls.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Limits of what a job may hold. Why these: docs/map-reduce.md#limits.
const (
	// MaxParts is the largest total of a job. Its job item then holds 2,464 shard counts
	// (about 10 KB), which every complete-part rewrites.
	MaxParts = 10_000_000
	// MaxJobIDBytes is the longest job id, in bytes of UTF-8.
	MaxJobIDBytes = 1024
	// MaxMetadataBytes is the largest metadata document, compacted.
	MaxMetadataBytes = 256 << 10
	// MaxReasonBytes is the longest reason of fail-job.
	MaxReasonBytes = 32 << 10
)

// The table's key and the items of a job. Every item of a job shares its partition key.
const (
	// KeyJob is the partition key (a string): the job id.
	KeyJob = "id"
	// KeyItem is the sort key (a string): which item of the job.
	KeyItem = "sk"

	jobItem     = "job"    // total, remaining, counted: written by set-total and complete-part
	infoItem    = "info"   // metadata, reason, reduceSent: written by the other commands
	shardPrefix = "shard#" // the parts' bitmaps: shard#00000, shard#00001, ...

	// TTLAttribute is every item's expiry, in epoch seconds, when the store has a ttl: the
	// attribute the table's time to live is set on.
	TTLAttribute = "expires_at"

	// DefaultTTL is how long a job's items live after their last write unless told (--ttl).
	DefaultTTL = 30 * 24 * time.Hour
)

// Attributes of the items.
const (
	attrTotal      = "total"      // job: the number of parts
	attrRemaining  = "remaining"  // job: parts not yet counted
	attrCounted    = "counted"    // job: list, per shard, of its parts counted into remaining
	attrWriter     = "w"          // job and shard: token of the call that wrote last
	attrBits       = "bits"       // shard: bitmap of its completed parts
	attrVersion    = "v"          // shard: incremented by every write
	attrMetadata   = "metadata"   // info: the metadata document, as compact JSON
	attrReason     = "reason"     // info: why the job failed
	attrReduceSent = "reduceSent" // info: true once reduce-sent was called
)

// Errors a caller may want to tell apart. All of them are wrapped with the job and table.
var (
	// ErrNoTotal: complete-part on a job whose total was never set.
	ErrNoTotal = errors.New("its total was never set: set-total comes first")
	// ErrTableNotFound: the table does not exist (in this region and account).
	ErrTableNotFound = errors.New("table not found")
	// ErrKeySchema: the table exists but its key is not KeyJob and KeyItem.
	ErrKeySchema = fmt.Errorf("table's key is not %s (string, partition key) and %s (string, sort key); "+
		"Watchbot's progress table (%s only) cannot be reused", KeyJob, KeyItem, KeyJob)
	// ErrTotalDiffers: set-total on a job that already has another total.
	ErrTotalDiffers = errors.New("the job already has another total")
)

// maxConflicts bounds how often one step of a call retries after losing a race to another
// call's conditional write. Each loss means another call made progress, so it takes
// a crowd of calls on one item to exhaust it.
const maxConflicts = 100

// conflictDelay is the wait before retrying a step that lost a race: 5 ms doubling to 320 ms,
// full jitter, so contenders spread out instead of paying for failed writes in lockstep.
var conflictDelay = backoff.Exponential{Base: 5 * time.Millisecond, Max: 320 * time.Millisecond, Jitter: backoff.Full}

// Store reads and writes the jobs of one progress table. Its methods are the commands of
// watchbot-progress; they may be called concurrently, from any number of processes.
type Store struct {
	client API
	table  string
	// ttl, when not 0, is how long each item lives after its last write: every write sets
	// TTLAttribute, which the table's time to live deletes by.
	ttl time.Duration
	// random returns numbers in [0, 1) for the jitter of conflict retries.
	random func() float64
	// token returns a fresh token for each call that completes a part (see CompletePart).
	token func() string
}

// NewStore returns the Store of table (a table name, not an ARN: see ParseTable). With ttl
// not 0, a job's items expire ttl after their last write (TTLAttribute).
func NewStore(client API, table string, ttl time.Duration) *Store {
	return &Store{
		client: client,
		table:  table,
		ttl:    ttl,
		random: rand.Float64,
		token:  func() string { return strconv.FormatUint(rand.Uint64(), 36) },
	}
}

// ValidateJobID refuses job ids DynamoDB cannot key on or that would not fit the limits.
func ValidateJobID(job string) error {
	switch {
	case job == "":
		return errors.New("no job id given")
	case !utf8.ValidString(job):
		return fmt.Errorf("job id %q is not valid UTF-8", job)
	case len(job) > MaxJobIDBytes:
		return fmt.Errorf("job id is %d bytes long; at most %d", len(job), MaxJobIDBytes)
	}
	return nil
}

// ValidateTotal refuses a total outside 1..MaxParts.
func ValidateTotal(total int64) error {
	if total < 1 || total > MaxParts {
		return fmt.Errorf("total %d is outside 1..%d", total, MaxParts)
	}
	return nil
}

// SetTotal records that job has total parts, numbered 1 to total. It is idempotent: on a job
// that already has this total it changes nothing (parts already complete stay complete) and
// reports created false; on a job with another total it fails with ErrTotalDiffers.
// watchbot-progress instead started the job afresh, forgetting completed parts.
func (s *Store) SetTotal(ctx context.Context, job string, total int64) (created bool, err error) {
	if err := ValidateJobID(job); err != nil {
		return false, err
	}
	if err := ValidateTotal(total); err != nil {
		return false, err
	}
	counted := make([]types.AttributeValue, shardCount(total))
	for i := range counted {
		counted[i] = ddbattr.N(0)
	}
	// UpdateItem, not PutItem: its Key must match the table's key exactly, so a table with
	// another key schema is refused here rather than given a stray item.
	_, err = s.client.UpdateItem(ctx, s.expiring(&dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(job, jobItem),
		UpdateExpression:         aws.String("SET #t = :t, #r = :t, #c = :c"),
		ConditionExpression:      aws.String("attribute_not_exists(#t)"),
		ExpressionAttributeNames: map[string]string{"#t": attrTotal, "#r": attrRemaining, "#c": attrCounted},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":t": ddbattr.N(total),
			":c": &types.AttributeValueMemberL{Value: counted},
		},
	}))
	if err == nil {
		return true, nil
	}
	if !isConflict(err) {
		return false, s.wrap("set-total", job, err)
	}
	j, err := s.readJob(ctx, job)
	if err != nil {
		return false, err
	}
	if j.total != total {
		return false, fmt.Errorf("set-total %s to %d: %w (%d)", strconv.Quote(job), total, ErrTotalDiffers, j.total)
	}
	return false, nil
}

// SetMetadata stores metadata, a JSON document (compacted), on job, replacing any before.
func (s *Store) SetMetadata(ctx context.Context, job string, metadata []byte) error {
	doc, err := CompactMetadata(metadata)
	if err != nil {
		return err
	}
	return s.setInfo(ctx, "set-metadata", job, attrMetadata, ddbattr.S(string(doc)))
}

// CompactMetadata checks that metadata is one JSON document within MaxMetadataBytes and
// returns it compacted, as it is stored and printed.
func CompactMetadata(metadata []byte) ([]byte, error) {
	var doc bytes.Buffer
	if err := json.Compact(&doc, metadata); err != nil {
		return nil, fmt.Errorf("metadata is not JSON: %w", err)
	}
	if doc.Len() > MaxMetadataBytes {
		return nil, fmt.Errorf("metadata is %d bytes of JSON; at most %d", doc.Len(), MaxMetadataBytes)
	}
	return doc.Bytes(), nil
}

// FailJob marks job as failed, for reason (required), replacing any reason before.
// Completing parts goes on as before: status reports the failure and workers decide.
func (s *Store) FailJob(ctx context.Context, job, reason string) error {
	switch {
	case reason == "":
		return setting.Refuse("", nil, "fail-job needs a reason ("+setting.Ref(setting.Reason)+")")
	case !utf8.ValidString(reason):
		return errors.New("the reason is not valid UTF-8")
	case len(reason) > MaxReasonBytes:
		return fmt.Errorf("the reason is %d bytes long; at most %d", len(reason), MaxReasonBytes)
	}
	return s.setInfo(ctx, "fail-job", job, attrReason, ddbattr.S(reason))
}

// ReduceSent records that job's reduce step was sent.
func (s *Store) ReduceSent(ctx context.Context, job string) error {
	return s.setInfo(ctx, "reduce-sent", job, attrReduceSent, &types.AttributeValueMemberBOOL{Value: true})
}

// setInfo sets one attribute of job's info item, creating the item when needed.
func (s *Store) setInfo(ctx context.Context, op, job, attr string, v types.AttributeValue) error {
	if err := ValidateJobID(job); err != nil {
		return err
	}
	_, err := s.client.UpdateItem(ctx, s.expiring(&dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(job, infoItem),
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": v},
	}))
	return s.wrap(op, job, err)
}

// expiring adds to an update that sets attributes the item's expiry, TTLAttribute, when the
// store has a ttl: now plus the ttl, in epoch seconds, as DynamoDB's time to live reads it.
func (s *Store) expiring(in *dynamodb.UpdateItemInput) *dynamodb.UpdateItemInput {
	if s.ttl == 0 {
		return in
	}
	in.UpdateExpression = aws.String(aws.ToString(in.UpdateExpression) + ", #exp = :exp")
	in.ExpressionAttributeNames["#exp"] = TTLAttribute
	in.ExpressionAttributeValues[":exp"] = ddbattr.N(time.Now().Add(s.ttl).Unix())
	return in
}

// jobState is what a job item says.
type jobState struct {
	total, remaining int64
	counted          []int64
	writer           string
}

// readJob reads job's job item with a strongly consistent read. A missing item is ErrNoTotal.
func (s *Store) readJob(ctx context.Context, job string) (jobState, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(job, jobItem), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return jobState{}, s.wrap("read job", job, err)
	}
	return s.decodeJob(job, out.Item)
}

// decodeJob decodes a job item; nil is ErrNoTotal.
func (s *Store) decodeJob(job string, item map[string]types.AttributeValue) (jobState, error) {
	if item == nil {
		return jobState{}, fmt.Errorf("job %s: %w", strconv.Quote(job), ErrNoTotal)
	}
	var j jobState
	var err error
	if j.total, err = ddbattr.Int(item, attrTotal); err == nil {
		j.remaining, err = ddbattr.Int(item, attrRemaining)
	}
	if err == nil {
		j.counted, err = intsOf(item, attrCounted)
	}
	if err == nil && len(j.counted) != shardCount(j.total) {
		err = fmt.Errorf("%d shard counts for %d parts", len(j.counted), j.total)
	}
	if err != nil {
		return jobState{}, fmt.Errorf("job %s in table %s: malformed job item: %w", strconv.Quote(job), s.table, err)
	}
	j.writer = ddbattr.String(item, attrWriter)
	return j, nil
}

// wrap names the operation, job and table in err, and turns DynamoDB's answers that mean the
// table is missing or not a progress table into ErrTableNotFound and ErrKeySchema.
func (s *Store) wrap(op, job string, err error) error {
	if err == nil {
		return nil
	}
	var nf *types.ResourceNotFoundException
	var api smithy.APIError
	switch {
	case errors.As(err, &nf):
		err = fmt.Errorf("%w: %w", ErrTableNotFound, err)
	case errors.As(err, &api) && api.ErrorCode() == "ValidationException" && isKeySchemaMessage(api.ErrorMessage()):
		err = fmt.Errorf("%w: %w", ErrKeySchema, err)
	}
	return fmt.Errorf("%s %s in table %s: %w", op, strconv.Quote(job), s.table, err)
}

// isKeySchemaMessage recognises DynamoDB's answer to a key that does not match the table's
// schema ("The provided key element does not match the schema", or a missing key attribute).
func isKeySchemaMessage(msg string) bool {
	msg = strings.ToLower(msg)
	return strings.Contains(msg, "key element does not match the schema") || strings.Contains(msg, "missing the key")
}

// isConflict reports whether err is a failed condition: another call wrote first.
func isConflict(err error) bool {
	var c *types.ConditionalCheckFailedException
	return errors.As(err, &c)
}

// pause waits the jittered delay after the attempt-th lost race, or until ctx ends.
func (s *Store) pause(ctx context.Context, attempt int) error {
	t := time.NewTimer(conflictDelay.Delay(attempt, s.random))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// key is the primary key of one item of job.
func key(job, item string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{KeyJob: ddbattr.S(job), KeyItem: ddbattr.S(item)}
}
