package progress

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Table is where a job's progress lives: a table name, and the region when an ARN named it.
type Table struct {
	Name string
	// Region is the ARN's region; empty for a bare name (the SDK's region applies).
	Region string
}

var tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// ParseTable reads a table as Watchbot passes it in $ProgressTable, an ARN
// (arn:aws:dynamodb:us-east-1:123456789012:table/name), or as a bare table name.
func ParseTable(s string) (Table, error) {
	if !strings.HasPrefix(s, "arn:") {
		if !tableName.MatchString(s) {
			return Table{}, fmt.Errorf("%s is neither a table name (3 to 255 letters, digits, _ - .) nor a table ARN (arn:aws:dynamodb:REGION:ACCOUNT:table/NAME)", strconv.Quote(s))
		}
		return Table{Name: s}, nil
	}
	// arn:PARTITION:dynamodb:REGION:ACCOUNT:table/NAME
	f := strings.SplitN(s, ":", 6)
	name, ok := "", len(f) == 6
	if ok {
		name, ok = strings.CutPrefix(f[5], "table/")
	}
	if !ok || f[2] != "dynamodb" || f[3] == "" || !tableName.MatchString(name) {
		return Table{}, fmt.Errorf("%s is not a DynamoDB table ARN (arn:aws:dynamodb:REGION:ACCOUNT:table/NAME)", strconv.Quote(s))
	}
	return Table{Name: name, Region: f[3]}, nil
}

// TableDefinition is the CreateTable request of a progress table: the key (KeyJob, KeyItem,
// both strings) and on-demand billing. docs/map-reduce.md shows the same as CloudFormation.
func TableDefinition(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName: aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(KeyJob), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(KeyItem), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(KeyJob), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(KeyItem), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	}
}

// intsOf reads the list of numbers name of item.
func intsOf(item map[string]types.AttributeValue, name string) ([]int64, error) {
	l, ok := item[name].(*types.AttributeValueMemberL)
	if !ok {
		return nil, fmt.Errorf("%s is missing or not a list", name)
	}
	out := make([]int64, len(l.Value))
	for i, v := range l.Value {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return nil, fmt.Errorf("%s[%d] is not a number", name, i)
		}
		var err error
		if out[i], err = strconv.ParseInt(n.Value, 10, 64); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", name, i, err)
		}
	}
	return out, nil
}

// bytesOf, boolOf read an optional attribute: missing or of another type, they
// return the zero value.

func bytesOf(item map[string]types.AttributeValue, name string) []byte {
	if v, ok := item[name].(*types.AttributeValueMemberB); ok {
		return v.Value
	}
	return nil
}

func boolOf(item map[string]types.AttributeValue, name string) bool {
	v, ok := item[name].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}
