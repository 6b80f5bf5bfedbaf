package testenv

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Dynamo is a running dynalite, the pinned DynamoDB emulator: in memory, tables ready at once.
// It serves tables, Get/Put/Update/Delete item with condition expressions, Query, Scan and the
// batch calls; not transactions (TransactWriteItems) nor UpdateTimeToLive.
type Dynamo struct {
	// Endpoint is the emulator's base URL, always on 127.0.0.1.
	Endpoint string
}

var (
	dynamoOnce sync.Once
	dynamo     *Dynamo
	dynamoErr  error
)

// DynamoDB returns the shared DynamoDB emulator, starting it on first use. It fails the test
// under CI=true and skips it elsewhere when the emulator cannot start.
func DynamoDB(tb testing.TB) *Dynamo {
	tb.Helper()
	dynamoOnce.Do(func() { dynamo, dynamoErr = StartDynamo() })
	Require(tb, "DynamoDB emulator did not start", dynamoErr)
	return dynamo
}

// StartDynamo installs (when needed) and starts a new DynamoDB emulator on a free port of
// 127.0.0.1. It runs until this process exits. Tests use DynamoDB, which shares one per test
// binary; demos and benchmarks call this.
func StartDynamo() (*Dynamo, error) {
	port, err := startServer("dynalite", "dynalite-server.mjs", "dynalite listening on port ",
		"DYNALITE_PORT=0", "DYNALITE_EXIT_ON_STDIN_CLOSE=1")
	if err != nil {
		return nil, err
	}
	return &Dynamo{Endpoint: "http://127.0.0.1:" + port}, nil
}

// Client returns a real DynamoDB client that sends every request to the emulator.
func (d *Dynamo) Client() *dynamodb.Client { return DynamoClientFor(d.Endpoint) }

// DynamoClientFor returns a real DynamoDB client that sends every request to endpoint (the
// emulator, or a proxy in front of it) with the test credentials and Region; opts adjust it
// further, e.g. its retryer.
func DynamoClientFor(endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(config(), append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	}}, opts...)...)
}

// Env returns environment variables that point the watchbot binary's DynamoDB client at the
// emulator.
func (d *Dynamo) Env() []string {
	return append(credentialsEnv(), "AWS_ENDPOINT_URL_DYNAMODB="+d.Endpoint)
}

var tableSeq atomic.Int64

// NewTable creates a uniquely named table for this test, as define describes a table of that
// name, and returns its name. A progress table: d.NewTable(t, progress.TableDefinition).
func (d *Dynamo) NewTable(tb testing.TB, define func(name string) *dynamodb.CreateTableInput) string {
	tb.Helper()
	name := sanitize(tb.Name()) + "-" + strconv.FormatInt(tableSeq.Add(1), 10) + "-" +
		strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	if err := CreateTable(context.Background(), d.Client(), define(name)); err != nil {
		tb.Fatal(err)
	}
	return name
}

// CreateTable creates a table, such as progress.TableDefinition(name), and returns once it
// is ready (at once on the emulator). Like CreateQueue it needs no test.
func CreateTable(ctx context.Context, c *dynamodb.Client, def *dynamodb.CreateTableInput) error {
	name := aws.ToString(def.TableName)
	if _, err := c.CreateTable(ctx, def); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	// The emulator answers CreateTable with the table still CREATING, and calls on it fail
	// with ResourceNotFoundException until it is ACTIVE, a moment later.
	exists := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	})
	if err := exists.Wait(ctx, &dynamodb.DescribeTableInput{TableName: def.TableName}, 30*time.Second); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	return nil
}
