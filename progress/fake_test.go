package progress

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// fakeDB is an in-memory DynamoDB table that behaves as DynamoDB does for the calls and the
// expressions Store makes: items by key, strongly consistent reads, conditions checked and
// writes applied atomically per item, ConditionalCheckFailedException when a condition is
// false, ResourceNotFoundException for another table. It runs a 100,000-part job in seconds,
// where the emulator takes minutes; the emulator tests the same code through the real SDK.
type fakeDB struct {
	table string
	mu    sync.Mutex
	items map[[2]string]map[string]types.AttributeValue
}

var _ API = (*fakeDB)(nil)

func newFakeDB(table string) *fakeDB {
	return &fakeDB{table: table, items: map[[2]string]map[string]types.AttributeValue{}}
}

func (f *fakeDB) keyOf(table *string, k map[string]types.AttributeValue) ([2]string, error) {
	if aws.ToString(table) != f.table {
		return [2]string{}, &types.ResourceNotFoundException{Message: aws.String("Requested resource not found")}
	}
	return [2]string{ddbattr.String(k, KeyJob), ddbattr.String(k, KeyItem)}, nil
}

func (f *fakeDB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	k, err := f.keyOf(in.TableName, in.Key)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &dynamodb.GetItemOutput{Item: copyItem(f.items[k])}, nil
}

func (f *fakeDB) BatchGetItem(_ context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	out := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}
	f.mu.Lock()
	defer f.mu.Unlock()
	for table, ka := range in.RequestItems {
		for _, key := range ka.Keys {
			k, err := f.keyOf(&table, key)
			if err != nil {
				return nil, err
			}
			if item := f.items[k]; item != nil {
				out.Responses[table] = append(out.Responses[table], copyItem(item))
			}
		}
	}
	return out, nil
}

func (f *fakeDB) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	k, err := f.keyOf(in.TableName, in.Key)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := expr{names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues}
	item := copyItem(f.items[k])
	if item == nil {
		item = copyItem(in.Key)
	}
	if c := aws.ToString(in.ConditionExpression); c != "" {
		ok, err := e.holds(item, c)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
		}
	}
	updated, err := e.apply(item, aws.ToString(in.UpdateExpression))
	if err != nil {
		return nil, err
	}
	f.items[k] = item
	out := &dynamodb.UpdateItemOutput{}
	if in.ReturnValues == types.ReturnValueUpdatedNew {
		out.Attributes = map[string]types.AttributeValue{}
		for _, name := range updated {
			out.Attributes[name] = copyValue(item[name])
		}
	}
	return out, nil
}

// expr evaluates the expressions Store writes:
//
//	condition  attribute_not_exists(#a) | PATH = :v
//	update     SET PATH = :v | PATH = PATH - :v [, ...]
//	PATH       #a | #a[N]
type expr struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

// submatches is re.FindStringSubmatch(s), remembered: Store sends the same few expressions
// over and over.
func submatches(re *regexp.Regexp, s string) []string {
	k := re.String() + "\x00" + s
	if m, ok := matches.Load(k); ok {
		return m.([]string)
	}
	m := re.FindStringSubmatch(s)
	matches.Store(k, m)
	return m
}

var matches sync.Map // pattern NUL text → []string

var (
	notExists = regexp.MustCompile(`^attribute_not_exists\((#\w+)\)$`)
	equals    = regexp.MustCompile(`^(#\w+(?:\[\d+\])?) = (:\w+)$`)
	assign    = regexp.MustCompile(`^(#\w+(?:\[\d+\])?) = (?:(:\w+)|(#\w+) - (:\w+))$`)
	path      = regexp.MustCompile(`^(#\w+)(?:\[(\d+)\])?$`)
)

func (e expr) holds(item map[string]types.AttributeValue, cond string) (bool, error) {
	if m := submatches(notExists, cond); m != nil {
		_, found := item[e.names[m[1]]]
		return !found, nil
	}
	if m := submatches(equals, cond); m != nil {
		v, err := e.get(item, m[1])
		return err == nil && equal(v, e.values[m[2]]), nil
	}
	return false, fmt.Errorf("fakeDB: condition %q not understood", cond)
}

// apply runs a SET update on item and returns the top-level attributes it changed.
func (e expr) apply(item map[string]types.AttributeValue, update string) ([]string, error) {
	list, ok := strings.CutPrefix(update, "SET ")
	if !ok {
		return nil, fmt.Errorf("fakeDB: update %q not understood", update)
	}
	var changed []string
	for _, a := range strings.Split(list, ", ") {
		m := submatches(assign, a)
		if m == nil {
			return nil, fmt.Errorf("fakeDB: assignment %q not understood", a)
		}
		v := e.values[m[2]]
		if m[3] != "" {
			left, err := e.get(item, m[3])
			if err != nil {
				return nil, err
			}
			a, b := left.(*types.AttributeValueMemberN), e.values[m[4]].(*types.AttributeValueMemberN)
			x, _ := strconv.ParseInt(a.Value, 10, 64)
			y, _ := strconv.ParseInt(b.Value, 10, 64)
			v = ddbattr.N(x - y)
		}
		name, err := e.set(item, m[1], copyValue(v))
		if err != nil {
			return nil, err
		}
		changed = append(changed, name)
	}
	return changed, nil
}

func (e expr) get(item map[string]types.AttributeValue, p string) (types.AttributeValue, error) {
	m := submatches(path, p)
	v, found := item[e.names[m[1]]]
	if !found {
		return nil, fmt.Errorf("fakeDB: %s is missing", p)
	}
	if m[2] == "" {
		return v, nil
	}
	i, _ := strconv.Atoi(m[2])
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok || i >= len(l.Value) {
		return nil, fmt.Errorf("fakeDB: %s is not in the list", p)
	}
	return l.Value[i], nil
}

func (e expr) set(item map[string]types.AttributeValue, p string, v types.AttributeValue) (string, error) {
	m := submatches(path, p)
	name := e.names[m[1]]
	if m[2] == "" {
		item[name] = v
		return name, nil
	}
	i, _ := strconv.Atoi(m[2])
	l, ok := item[name].(*types.AttributeValueMemberL)
	if !ok || i >= len(l.Value) {
		return "", fmt.Errorf("fakeDB: %s is not in the list", p)
	}
	l.Value[i] = v
	return name, nil
}

func equal(a, b types.AttributeValue) bool {
	switch a := a.(type) {
	case *types.AttributeValueMemberN:
		b, ok := b.(*types.AttributeValueMemberN)
		return ok && a.Value == b.Value
	case *types.AttributeValueMemberS:
		b, ok := b.(*types.AttributeValueMemberS)
		return ok && a.Value == b.Value
	case *types.AttributeValueMemberB:
		b, ok := b.(*types.AttributeValueMemberB)
		return ok && bytes.Equal(a.Value, b.Value)
	}
	return false
}

func copyItem(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	if item == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v types.AttributeValue) types.AttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberL:
		l := make([]types.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = copyValue(e)
		}
		return &types.AttributeValueMemberL{Value: l}
	case *types.AttributeValueMemberB:
		return &types.AttributeValueMemberB{Value: bytes.Clone(v.Value)}
	case *types.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: v.Value}
	case *types.AttributeValueMemberN:
		return &types.AttributeValueMemberN{Value: v.Value}
	case *types.AttributeValueMemberBOOL:
		return &types.AttributeValueMemberBOOL{Value: v.Value}
	}
	panic(fmt.Sprintf("fakeDB: no copy of %T", v))
}

// faulty wraps an API to inject faults. before, when set, is asked before each call and may
// answer an error instead of making it (throttling, a 5xx, a refused connection); after, when
// set, is asked after each UpdateItem that took effect and may answer an error instead of the
// success: the write happened but its caller never learned it (a crash, a lost answer).
type faulty struct {
	API
	before func(op string, in any) error
	after  func(op string, in *dynamodb.UpdateItemInput) error
}

func (f *faulty) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := f.check("GetItem", in); err != nil {
		return nil, err
	}
	return f.API.GetItem(ctx, in, opts...)
}

func (f *faulty) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	if err := f.check("BatchGetItem", in); err != nil {
		return nil, err
	}
	return f.API.BatchGetItem(ctx, in, opts...)
}

func (f *faulty) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := f.check("UpdateItem", in); err != nil {
		return nil, err
	}
	out, err := f.API.UpdateItem(ctx, in, opts...)
	if err == nil && f.after != nil {
		if err := f.after("UpdateItem", in); err != nil {
			return nil, err
		}
	}
	return out, err
}

func (f *faulty) check(op string, in any) error {
	if f.before == nil {
		return nil
	}
	return f.before(op, in)
}
