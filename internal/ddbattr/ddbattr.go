// Package ddbattr builds and reads the DynamoDB attribute values that watchbot's tables
// (dedupe, progress, limits) store as strings and integers, so that each package reads
// them the same way.
package ddbattr

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// S is the string attribute value s.
func S(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// N is the number attribute value n.
func N(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// String reads the string attribute name of item: "" when it is missing or not a string.
func String(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// Int reads the integer attribute name of item; the error names the attribute.
func Int(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%s is missing or not a number", name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

// HashKeyTable is the CreateTable request of a table named name keyed by the string attribute
// key alone, billed on demand: the shape of every table watchbot keeps. Time to live is
// turned on apart (UpdateTimeToLive, or CloudFormation's TimeToLiveSpecification).
func HashKeyTable(name, key string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(key), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
}
