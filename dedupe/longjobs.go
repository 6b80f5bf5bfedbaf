package dedupe

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// ScanAPI is the part of the DynamoDB client LongJobs calls.
type ScanAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ ScanAPI = (*dynamodb.Client)(nil)

// LongJob is a job under way, as its claim records it.
type LongJob struct {
	// Key is the job's dedupe key; Owner the claim that runs it (HOST:PID:RANDOM/MESSAGE-ID/N)
	// and MessageID its message.
	Key       string `json:"key"`
	Owner     string `json:"owner"`
	MessageID string `json:"messageId"`
	// Started is when the claim was taken; LeaseUntil when it lapses unless extended.
	Started    time.Time `json:"started"`
	LeaseUntil time.Time `json:"leaseUntil"`
	// Relays is how many new deliveries of the message were relayed to the owner.
	Relays int `json:"relays"`
}

// longJobsFilter: the scope's records in progress, their lease not lapsed, claimed before
// the cut.
const longJobsFilter = "begins_with(#key, :scope) AND #state = :in_progress AND #lease >= :now_ms AND #started < :cut_ms"

// LongJobs lists the jobs of scope (a queue's name) in table that have run longer than
// olderThan at now, their owner's lease live: the jobs past SQS's in-flight limit, whose
// messages are relayed. It scans the whole table (paginated, one read unit per 4 KB read),
// which an operator's command can afford and listen never does.
func LongJobs(ctx context.Context, api ScanAPI, table, scope string, olderThan time.Duration, now time.Time) ([]LongJob, error) {
	in := &dynamodb.ScanInput{
		TableName:                aws.String(table),
		FilterExpression:         aws.String(longJobsFilter),
		ExpressionAttributeNames: pick("#key", "#state", "#lease", "#started"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":scope": ddbattr.S(scope + "/"), ":in_progress": ddbattr.S(stateInProgress),
			":now_ms": ddbattr.N(now.UnixMilli()), ":cut_ms": ddbattr.N(now.Add(-olderThan).UnixMilli()),
		},
	}
	var jobs []LongJob
	for {
		out, err := api.Scan(ctx, in)
		if err != nil {
			return nil, (&Store{table: table}).wrap("scan", err)
		}
		for _, item := range out.Items {
			jobs = append(jobs, longJob(item, scope))
		}
		if len(out.LastEvaluatedKey) == 0 {
			return jobs, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// longJob reads one record of scope's as a LongJob.
func longJob(item map[string]types.AttributeValue, scope string) LongJob {
	started, _ := ddbattr.Int(item, attrStartedAt)
	lease, _ := ddbattr.Int(item, attrLease)
	relays, _ := ddbattr.Int(item, attrRelays)
	return LongJob{Key: strings.TrimPrefix(ddbattr.String(item, KeyAttribute), scope+"/"), Owner: ddbattr.String(item, attrOwner),
		MessageID: ddbattr.String(item, attrMessage), Started: time.UnixMilli(started), LeaseUntil: time.UnixMilli(lease), Relays: int(relays)}
}
