// Package dedupe keeps the records of duplicate suppression (`watchbot listen
// --dedupe-table`) in a DynamoDB table: one record per key, claimed by the run that is about
// to do the key's work, its lease extended while the run goes on, marked completed when the
// run succeeded, released when it did not (counting the key's runs, so that an attempt is a
// run, not a receive), and removed when its message left the queue unfinished (dead-lettered).
// A job that runs past SQS's in-flight limit keeps its message through relays: whoever
// receives the message again while its owner runs it writes the new receipt handle into the
// claim (Relay), and the owner takes it with its next extension.
// SQS standard queues deliver a message at least
// once, sometimes to two consumers at the same time, and producers send the same job twice;
// the records let every run of a key but one stand aside. Every write is a single conditional
// write (no transactions), so the table works on DynamoDB and on its emulators. The layout,
// each condition, what is guaranteed and what it costs: docs/dedupe.md.
package dedupe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// API is the part of the DynamoDB client a Store calls.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Errors a caller tells apart.
var (
	// ErrTableNotFound: the table does not exist (in this region and account).
	ErrTableNotFound = errors.New("table not found")
	// ErrKeySchema: the table's key is not KeyAttribute alone, a string.
	ErrKeySchema = fmt.Errorf("the table's key must be %q alone, a string (type %s), as `watchbot template --dedupe` creates it", KeyAttribute, KeyAttributeType)
	// ErrLost: the record is no longer the caller's: another run claimed the key after the
	// caller's lease lapsed, or the record is gone.
	ErrLost = errors.New("the record is no longer this run's")
)

// Result is what a claim found.
type Result int

// The results of Claim.
const (
	// Claimed: the key is the caller's until its lease lapses; it does the work.
	Claimed Result = iota
	// Completed: a run did the key's work and succeeded: the message is a duplicate.
	Completed
	// Held: another run holds the key and its lease has not lapsed: it is doing the work now.
	Held
)

func (r Result) String() string {
	return [...]string{"claimed", "completed", "held"}[r]
}

// Claim is the answer to a claim.
type Claim struct {
	Result Result
	// Run, with Claimed, is the run of the key this claim starts: 1 for a key without a
	// record, else one more than the runs its record counts.
	Run int
	// Owner, with Completed or Held, is the claim that completed or holds the key.
	Owner string
	// LeaseUntil, with Held, is when the holder's lease lapses, unless it extends it.
	LeaseUntil time.Time
	// MessageID, with Held, is the id of the message the holder runs: a new delivery of that
	// message is relayed to it, another message of the same key waits.
	MessageID string
}

// Relayed is the newest relay of a claim's message: a new delivery's receipt handle, which
// the owner renews and finally deletes with. The zero value: no relay yet.
type Relayed struct {
	// Count is how many relays the claim has had; a later relay has a higher count.
	Count int
	// Receipt is the newest relay's receipt handle, and ReceivedAt when its receive was, from
	// which SQS counts the message's time in flight anew.
	Receipt    string
	ReceivedAt time.Time
}

// TTLStatus is whether the table deletes expired records.
type TTLStatus int

// The TTLStatus values.
const (
	// TTLUnknown: the table's time to live could not be read.
	TTLUnknown TTLStatus = iota
	// TTLOn: expired records are deleted by DynamoDB.
	TTLOn
	// TTLOff: time to live is off, or on another attribute: records stay until removed.
	TTLOff
)

// Store claims, extends, completes and releases the keys of one scope (a queue) in one
// table. Its methods may be called concurrently, from any number of processes.
type Store struct {
	client API
	table  string
	scope  string
	// now is the clock leases and expiry are judged by.
	now func() time.Time
}

// NewStore returns the Store of scope's keys in table. The scope (the queue's name) keeps
// the keys of queues that share a table apart.
func NewStore(client API, table, scope string) *Store {
	return &Store{client: client, table: table, scope: scope, now: time.Now}
}

// Names and values the expressions use.
var names = map[string]string{"#key": KeyAttribute, "#exp": TTLAttribute, "#state": attrState, "#owner": attrOwner, "#lease": attrLease,
	"#done": attrCompletedAt, "#runs": attrRuns, "#msg": attrMessage, "#receipt": attrReceipt, "#rat": attrReceivedAt, "#relays": attrRelays, "#started": attrStartedAt}

// The conditions of the writes (docs/dedupe.md explains each).
const (
	// claimCondition: no record, or one that expired (TTL deletion lags), or one released by
	// a run that did not succeed, or one in progress whose owner's lease lapsed (the owner
	// crashed or lost it). A retried call of our own fails it, and is told apart by the
	// record it failed on.
	claimCondition = "attribute_not_exists(#key) OR #exp < :now_s OR #state = :released OR (#state = :in_progress AND #lease < :now_ms)"
	// extendCondition: still ours, still in progress.
	extendCondition = "#owner = :owner AND #state = :in_progress"
	// completeCondition: still ours (completing twice is the same as once).
	completeCondition = "#owner = :owner"
	// releaseCondition: still ours and in progress. A retried call fails it, and takes no run
	// back twice.
	releaseCondition = "#owner = :owner AND #state = :in_progress"
	// relayCondition: the owner's, in progress, its lease not lapsed, and the same message: a
	// relay hands a new delivery only to a live run of that message.
	relayCondition = "#owner = :owner AND #state = :in_progress AND #lease >= :now_ms AND #msg = :msg"
	// forgetCondition: still ours and in progress, or already gone (a retried call).
	forgetCondition = "attribute_not_exists(#key) OR (#owner = :owner AND #state = :in_progress)"
)

// claimUpdate takes the key for a message and counts the run it starts; a completed record
// that expired counts none (Complete removes its count). The relays of an earlier claim go.
const claimUpdate = "SET #state = :in_progress, #owner = :owner, #msg = :msg, #started = :now_ms, #lease = :lease, #exp = :exp, #runs = if_not_exists(#runs, :zero) + :one REMOVE #done, #receipt, #rat, #relays"

// maxClaimTries bounds how often Claim writes again when the record it lost to was gone or
// had lapsed by the time it was read.
const maxClaimTries = 3

// Claim takes key for owner (a string unique to this claim), to run message messageID, until
// leaseUntil, unless a run completed it or holds it with a lease that has not lapsed, and
// counts the run it starts.
// One conditional UpdateItem; when the condition fails, the record that failed it says why
// (DynamoDB returns it; otherwise one strongly consistent GetItem reads it).
func (s *Store) Claim(ctx context.Context, key, owner, messageID string, leaseUntil time.Time) (Claim, error) {
	k := s.key(key)
	for range maxClaimTries {
		now := s.now()
		out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                aws.String(s.table),
			Key:                      map[string]types.AttributeValue{KeyAttribute: ddbattr.S(k)},
			UpdateExpression:         aws.String(claimUpdate),
			ConditionExpression:      aws.String(claimCondition),
			ExpressionAttributeNames: pick("#key", "#exp", "#state", "#lease", "#owner", "#runs", "#done", "#msg", "#receipt", "#rat", "#relays", "#started"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":now_s": ddbattr.N(now.Unix()), ":now_ms": ddbattr.N(now.UnixMilli()), ":in_progress": ddbattr.S(stateInProgress),
				":released": ddbattr.S(stateReleased), ":owner": ddbattr.S(owner), ":lease": millis(leaseUntil), ":exp": seconds(leaseUntil),
				":zero": ddbattr.N(0), ":one": ddbattr.N(1), ":msg": ddbattr.S(messageID),
			},
			ReturnValues:                        types.ReturnValueUpdatedNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			run, _ := ddbattr.Int(out.Attributes, attrRuns)
			return Claim{Result: Claimed, Run: int(run)}, nil
		}
		var failed *types.ConditionalCheckFailedException
		if !errors.As(err, &failed) {
			return Claim{}, s.wrap("claim", err)
		}
		item := failed.Item
		if item == nil {
			out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table),
				Key: map[string]types.AttributeValue{KeyAttribute: ddbattr.S(k)}, ConsistentRead: aws.Bool(true)})
			if err != nil {
				return Claim{}, s.wrap("claim: read the record", err)
			}
			item = out.Item
		}
		if c, ok := standing(item, owner, s.now()); ok {
			return c, nil
		}
		// Released, or lapsed, since the write: write again.
	}
	return Claim{}, fmt.Errorf("dedupe claim in table %s: the record changed under %d claims in a row", s.table, maxClaimTries)
}

// standing reads a record that failed a claim's condition: completed, or held by another
// run whose lease has not lapsed, or held by owner itself (the claim's write landed, and its
// answer was lost: the SDK retried it). ok is false when the record no longer stands in the
// way.
func standing(item map[string]types.AttributeValue, owner string, now time.Time) (Claim, bool) {
	if item == nil {
		return Claim{}, false
	}
	exp, _ := ddbattr.Int(item, TTLAttribute)
	if exp < now.Unix() {
		return Claim{}, false
	}
	holder := ddbattr.String(item, attrOwner)
	switch ddbattr.String(item, attrState) {
	case stateCompleted:
		return Claim{Result: Completed, Owner: holder}, true
	case stateInProgress:
		lease, _ := ddbattr.Int(item, attrLease)
		switch {
		case holder == owner:
			run, _ := ddbattr.Int(item, attrRuns)
			return Claim{Result: Claimed, Run: int(run)}, true
		case lease < now.UnixMilli():
			return Claim{}, false
		}
		return Claim{Result: Held, Owner: holder, LeaseUntil: time.UnixMilli(lease), MessageID: ddbattr.String(item, attrMessage)}, true
	}
	return Claim{}, false
}

// Extend moves the lease of owner's claim of key to leaseUntil, and returns the claim's
// newest relay. ErrLost: the claim is no longer owner's.
func (s *Store) Extend(ctx context.Context, key, owner string, leaseUntil time.Time) (Relayed, error) {
	return s.updateRelayed(ctx, "extend", key, "SET #lease = :lease, #exp = :exp", extendCondition,
		pick("#lease", "#exp", "#owner", "#state"), map[string]types.AttributeValue{
			":lease": millis(leaseUntil), ":exp": seconds(leaseUntil), ":owner": ddbattr.S(owner), ":in_progress": ddbattr.S(stateInProgress),
		})
}

// Complete marks owner's claim of key completed, remembered until expiresAt: later claims
// of the key answer Completed until then, and a claim after that counts its runs from 1. It
// returns the claim's newest relay, whose receipt deletes the message. ErrLost: the claim is
// no longer owner's.
func (s *Store) Complete(ctx context.Context, key, owner string, expiresAt time.Time) (Relayed, error) {
	return s.updateRelayed(ctx, "complete", key, "SET #state = :completed, #exp = :exp, #done = :done REMOVE #runs", completeCondition,
		pick("#state", "#exp", "#done", "#owner", "#runs"), map[string]types.AttributeValue{
			":completed": ddbattr.S(stateCompleted), ":exp": seconds(expiresAt), ":done": millis(s.now()), ":owner": ddbattr.S(owner),
		})
}

// Relay hands a new delivery of message messageID, received at receivedAt with receipt, to
// owner, whose claim of key runs that message: the owner takes the receipt at its next
// extension. It returns the claim's relay count with this one. ErrLost: owner no longer holds
// the key with a live lease, or runs another message of it; the delivery is not relayed.
func (s *Store) Relay(ctx context.Context, key, owner, messageID, receipt string, receivedAt time.Time) (int, error) {
	r, err := s.updateRelayed(ctx, "relay", key, "SET #receipt = :receipt, #rat = :rat ADD #relays :one", relayCondition,
		pick("#owner", "#state", "#lease", "#msg", "#receipt", "#rat", "#relays"), map[string]types.AttributeValue{
			":receipt": ddbattr.S(receipt), ":rat": millis(receivedAt), ":one": ddbattr.N(1), ":owner": ddbattr.S(owner),
			":in_progress": ddbattr.S(stateInProgress), ":now_ms": ddbattr.N(s.now().UnixMilli()), ":msg": ddbattr.S(messageID),
		})
	return r.Count, err
}

// Release hands owner's claim of key back after a run that did not succeed: the record is
// released, so the next claim of the key succeeds at once, and keeps its count of runs until
// expiresAt (the message's retention: as long as it may come back), so that the next claim
// goes on counting. counted false takes back the run the claim counted: it was no attempt
// (the worker did not start, or watchbot stopped it). ErrLost: the claim is no longer
// owner's (another run holds or completed the key, the record is gone, or it was released
// already).
func (s *Store) Release(ctx context.Context, key, owner string, counted bool, expiresAt time.Time) error {
	expr := "SET #state = :released, #exp = :exp REMOVE #lease"
	nm := pick("#state", "#exp", "#lease", "#owner")
	values := map[string]types.AttributeValue{":released": ddbattr.S(stateReleased), ":exp": seconds(expiresAt), ":owner": ddbattr.S(owner),
		":in_progress": ddbattr.S(stateInProgress)}
	if !counted {
		expr = "SET #state = :released, #exp = :exp, #runs = #runs - :one REMOVE #lease"
		nm["#runs"], values[":one"] = names["#runs"], ddbattr.N(1)
	}
	return s.update(ctx, "release", key, expr, releaseCondition, nm, values)
}

// Forget removes owner's claim of key, its count of runs with it, so the next claim of the
// key starts again from run 1: its message left the queue without succeeding (dead-lettered,
// or deleted), and a replay of it gets every attempt again. ErrLost: another run holds the
// key now, or completed it.
func (s *Store) Forget(ctx context.Context, key, owner string) error {
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.table),
		Key:                       map[string]types.AttributeValue{KeyAttribute: ddbattr.S(s.key(key))},
		ConditionExpression:       aws.String(forgetCondition),
		ExpressionAttributeNames:  pick("#key", "#owner", "#state"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": ddbattr.S(owner), ":in_progress": ddbattr.S(stateInProgress)},
	})
	return s.wrap("forget", err)
}

// update makes one conditional UpdateItem of key's record.
func (s *Store) update(ctx context.Context, op, key, expr, cond string, nm map[string]string, values map[string]types.AttributeValue) error {
	_, err := s.client.UpdateItem(ctx, s.updateInput(key, expr, cond, nm, values))
	return s.wrap(op, err)
}

// updateInput is the conditional UpdateItem of key's record.
func (s *Store) updateInput(key, expr, cond string, nm map[string]string, values map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       map[string]types.AttributeValue{KeyAttribute: ddbattr.S(s.key(key))},
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  nm,
		ExpressionAttributeValues: values,
	}
}

// updateRelayed makes one conditional UpdateItem of key's record and returns the relay the
// record holds after it.
func (s *Store) updateRelayed(ctx context.Context, op, key, expr, cond string, nm map[string]string, values map[string]types.AttributeValue) (Relayed, error) {
	in := s.updateInput(key, expr, cond, nm, values)
	in.ReturnValues = types.ReturnValueAllNew
	out, err := s.client.UpdateItem(ctx, in)
	if err != nil {
		return Relayed{}, s.wrap(op, err)
	}
	count, _ := ddbattr.Int(out.Attributes, attrRelays)
	if count == 0 {
		return Relayed{}, nil
	}
	at, _ := ddbattr.Int(out.Attributes, attrReceivedAt)
	return Relayed{Count: int(count), Receipt: ddbattr.String(out.Attributes, attrReceipt), ReceivedAt: time.UnixMilli(at)}, nil
}

// Check verifies the table: it exists and its key is KeyAttribute alone, a string. It also
// reads whether its time to live is on TTLAttribute; that is TTLUnknown when it cannot be
// read (an emulator, or a role without dynamodb:DescribeTimeToLive).
func (s *Store) Check(ctx context.Context) (TTLStatus, error) {
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
	if err != nil {
		return TTLUnknown, s.wrap("describe", err)
	}
	if !keyedByKey(out.Table) {
		return TTLUnknown, fmt.Errorf("dedupe table %s: %w", s.table, ErrKeySchema)
	}
	ttl, err := s.client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(s.table)})
	if err != nil || ttl.TimeToLiveDescription == nil {
		return TTLUnknown, nil
	}
	d := ttl.TimeToLiveDescription
	if aws.ToString(d.AttributeName) == TTLAttribute && d.TimeToLiveStatus == types.TimeToLiveStatusEnabled {
		return TTLOn, nil
	}
	return TTLOff, nil
}

// keyedByKey reports a table whose key is KeyAttribute alone, a string.
func keyedByKey(t *types.TableDescription) bool {
	if t == nil || len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != KeyAttribute || t.KeySchema[0].KeyType != types.KeyTypeHash {
		return false
	}
	for _, d := range t.AttributeDefinitions {
		if aws.ToString(d.AttributeName) == KeyAttribute {
			return d.AttributeType == types.ScalarAttributeType(KeyAttributeType)
		}
	}
	return false
}

// key is key's record key in this store's scope.
func (s *Store) key(key string) string { return recordKey(s.scope, key) }

// wrap names the operation and table in err, and turns a failed condition into ErrLost and
// a missing table into ErrTableNotFound.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var failed *types.ConditionalCheckFailedException
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &failed):
		err = ErrLost
	case errors.As(err, &missing):
		err = fmt.Errorf("%w: %w", ErrTableNotFound, err)
	}
	return fmt.Errorf("dedupe %s in table %s: %w", op, s.table, err)
}

// pick returns the expression attribute names ns.
func pick(ns ...string) map[string]string {
	out := make(map[string]string, len(ns))
	for _, n := range ns {
		out[n] = names[n]
	}
	return out
}

// millis, seconds: attribute values. An expiry in seconds rounds up.
func millis(t time.Time) types.AttributeValue { return ddbattr.N(t.UnixMilli()) }

func seconds(t time.Time) types.AttributeValue {
	s := t.Unix()
	if t.After(time.Unix(s, 0)) {
		s++
	}
	return ddbattr.N(s)
}
