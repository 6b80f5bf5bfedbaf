package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/watchbot/watchbot/internal/ddbattr"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/supervisor"
)

// LimitSettings are the limits a listen sharing a limits table runs with (its limit flags),
// as the latest listen to start on the table wrote them there, for `watchbot status` to show
// (docs/limits.md). The limiter itself never reads them: each task runs by its own flags.
type LimitSettings struct {
	// RateLimit and RateLimitPerKey are starts a second (0: none).
	RateLimit         float64 `json:"rateLimit,omitempty"`
	FleetConcurrency  int     `json:"fleetConcurrency,omitempty"`
	LimitKey          string  `json:"limitKey,omitempty"`
	RateLimitPerKey   float64 `json:"rateLimitPerKey,omitempty"`
	ConcurrencyPerKey int     `json:"concurrencyPerKey,omitempty"`
	// LimitWait and MaxPause are Go durations ("30s").
	LimitWait string `json:"limitWait"`
	MaxPause  string `json:"maxPause"`
	// Task wrote them, at WrittenAt.
	Task      string    `json:"task"`
	WrittenAt time.Time `json:"writtenAt"`
}

// LimitSettingsOf returns the settings of c, written by task at now.
func LimitSettingsOf(c supervisor.LimitsConfig, task string, now time.Time) LimitSettings {
	f := c.Fleet
	return LimitSettings{RateLimit: f.Rate, FleetConcurrency: f.Concurrency, LimitKey: c.Key, RateLimitPerKey: f.RatePerKey,
		ConcurrencyPerKey: f.ConcurrencyPerKey, LimitWait: c.Wait.String(), MaxPause: f.MaxPause.String(), Task: task, WrittenAt: now.UTC()}
}

// Flags returns the settings as listen's flags, those set alone but --limit-wait and
// --max-pause, which always are.
func (s LimitSettings) Flags() string {
	var b []string
	rate := func(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) + "/s" }
	if s.RateLimit > 0 {
		b = append(b, "--rate-limit "+rate(s.RateLimit))
	}
	if s.FleetConcurrency > 0 {
		b = append(b, "--fleet-concurrency "+strconv.Itoa(s.FleetConcurrency))
	}
	if s.LimitKey != "" {
		b = append(b, "--limit-key "+s.LimitKey)
	}
	if s.RateLimitPerKey > 0 {
		b = append(b, "--rate-limit-per-key "+rate(s.RateLimitPerKey))
	}
	if s.ConcurrencyPerKey > 0 {
		b = append(b, "--concurrency-per-key "+strconv.Itoa(s.ConcurrencyPerKey))
	}
	b = append(b, "--limit-wait "+s.LimitWait, "--max-pause "+s.MaxPause)
	return strings.Join(b, " ")
}

// LimitSettingsAPI is the part of the DynamoDB client the settings' item needs.
type LimitSettingsAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// The settings' item in the limits table: its key, and the attribute holding them as JSON.
// It has no time to live: a fleet that runs for months keeps it, and each listen that starts
// writes it again.
const (
	limitSettingsItem = "settings"
	limitSettingsAttr = "settings"
)

// limitSettingsWriteTimeout bounds the write at a listen's start: the settings are for
// status, and a table that does not answer must not hold the start back.
const limitSettingsWriteTimeout = 2 * time.Second

// WriteLimitSettings writes s to the limits table, over what an earlier listen wrote.
func WriteLimitSettings(ctx context.Context, api LimitSettingsAPI, table string, s LimitSettings) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		limits.KeyAttribute: ddbattr.S(limitSettingsItem), limitSettingsAttr: ddbattr.S(string(raw))}})
	return err
}

// ReadLimitSettings reads the settings the latest listen to start on the limits table wrote;
// nil when none has. An operator's read, it needs no more than limits.OperatorAPI.
func ReadLimitSettings(ctx context.Context, api limits.OperatorAPI, table string) (*LimitSettings, error) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{limits.KeyAttribute: ddbattr.S(limitSettingsItem)}})
	if err != nil {
		return nil, err
	}
	raw := ddbattr.String(out.Item, limitSettingsAttr)
	if raw == "" {
		return nil, nil
	}
	var s LimitSettings
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, fmt.Errorf("the table's %s item: %w", limitSettingsItem, err)
	}
	return &s, nil
}
