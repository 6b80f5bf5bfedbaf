package dedupe

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// The table's schema, which `watchbot template --dedupe` renders and Check verifies. The
// table has one key, KeyAttribute, a string; its time to live, if turned on, must be on
// TTLAttribute. Everything else is in the records (docs/dedupe.md).
const (
	// KeyAttribute is the table's partition key, its only key attribute.
	KeyAttribute = "key"
	// KeyAttributeType is KeyAttribute's DynamoDB type: a string.
	KeyAttributeType = "S"
	// TTLAttribute holds when a record expires, in seconds since the Unix epoch (a number):
	// the attribute the table's time to live must name. Watchbot treats an expired record as
	// absent whether or not DynamoDB has deleted it yet.
	TTLAttribute = "expires_at"
)

// The other attributes of a record.
const (
	attrState       = "state"        // stateInProgress, stateReleased or stateCompleted
	attrOwner       = "owner"        // the claim that wrote the record
	attrLease       = "lease_until"  // in_progress: when the owner's lease lapses, epoch milliseconds
	attrCompletedAt = "completed_at" // completed: when, epoch milliseconds
	attrRuns        = "runs"         // in_progress and released: the runs of the key counted so far
	attrMessage     = "message"      // the id of the message the owner runs
	attrReceipt     = "receipt"      // the receipt handle of the message's newest relay
	attrReceivedAt  = "received_at"  // when the newest relay's receive was, epoch milliseconds
	attrRelays      = "relays"       // how many relays the claim has had
	attrStartedAt   = "started_at"   // in_progress: when the claim was taken, epoch milliseconds
)

// The states of a record.
const (
	stateInProgress = "in_progress"
	stateReleased   = "released"
	stateCompleted  = "completed"
)

// TableDefinition is the CreateTable request of a dedupe table named name: KeyAttribute as
// its only key, on-demand billing. Time to live is turned on apart, on TTLAttribute
// (UpdateTimeToLive, or CloudFormation's TimeToLiveSpecification).
func TableDefinition(name string) *dynamodb.CreateTableInput {
	return ddbattr.HashKeyTable(name, KeyAttribute)
}
