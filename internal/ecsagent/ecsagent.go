// Package ecsagent talks to the Amazon ECS container agent's task scale-in protection
// endpoint, ${ECS_AGENT_URI}/task-protection/v1/state, which the agent injects into every
// container of an ECS task ("Amazon ECS task scale-in protection endpoint" in the Amazon ECS
// Developer Guide). A PUT with {"ProtectionEnabled": true, "ExpiresInMinutes": N} keeps the
// service's scale-in and deployments from stopping the task for N minutes (1 to 2,880); false
// lets them. The agent answers 200 with {"protection": {...}} on success, 200 with
// {"failure": {"Arn", "Reason", "Detail"}} when ECS refused the call for the task, and 4xx/5xx
// with {"error": {"Arn", "Code", "Message"}} otherwise (the agent's task protection handler,
// aws/amazon-ecs-agent ecs-agent/tmds/handlers/taskprotection/v1).
package ecsagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// EnvURI is the variable the ECS agent sets to its endpoint in every container of a task.
const EnvURI = "ECS_AGENT_URI"

// Expiry limits of ExpiresInMinutes.
const (
	MinExpiry = time.Minute
	MaxExpiry = 2880 * time.Minute
)

// Client calls one task's protection endpoint.
type Client struct {
	url  string
	http *http.Client
}

// New returns a client for the agent at uri (the value of ECS_AGENT_URI). Each call is
// bounded by timeout.
func New(uri string, timeout time.Duration) *Client {
	return &Client{url: strings.TrimRight(uri, "/") + "/task-protection/v1/state", http: &http.Client{Timeout: timeout}}
}

// Protection is the agent's answer to a successful call.
type Protection struct {
	Enabled bool
	Expires time.Time // zero when not protected
}

// Error is a call the agent or ECS refused: Status is the HTTP status, Code and Message the
// agent's error (or ECS's failure Reason and Detail, with Status 200).
type Error struct {
	Status        int
	Code, Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("ECS agent task protection: %d %s: %s", e.Status, e.Code, e.Message)
}

// SetProtection turns the task's scale-in protection on for expires (rounded up to whole
// minutes, within MinExpiry..MaxExpiry), or off.
func (c *Client) SetProtection(ctx context.Context, enabled bool, expires time.Duration) (Protection, error) {
	req := struct {
		ProtectionEnabled bool
		ExpiresInMinutes  *int64 `json:",omitempty"`
	}{ProtectionEnabled: enabled}
	if enabled {
		minutes := int64((min(max(expires, MinExpiry), MaxExpiry) + time.Minute - 1) / time.Minute)
		req.ExpiresInMinutes = &minutes
	}
	body, _ := json.Marshal(req) // a bool and an int always encode
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url, bytes.NewReader(body))
	if err != nil {
		return Protection{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		return Protection{}, fmt.Errorf("ECS agent task protection: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Protection{}, fmt.Errorf("ECS agent task protection: read answer: %w", err)
	}
	var answer struct {
		Protection *struct {
			ProtectionEnabled bool
			ExpirationDate    *time.Time
		} `json:"protection"`
		Failure *struct{ Reason, Detail string } `json:"failure"`
		Error   *struct{ Code, Message string }  `json:"error"`
	}
	jsonErr := json.Unmarshal(data, &answer)
	switch {
	case answer.Error != nil:
		return Protection{}, &Error{Status: resp.StatusCode, Code: answer.Error.Code, Message: answer.Error.Message}
	case answer.Failure != nil:
		return Protection{}, &Error{Status: resp.StatusCode, Code: answer.Failure.Reason, Message: answer.Failure.Detail}
	case resp.StatusCode != http.StatusOK:
		return Protection{}, &Error{Status: resp.StatusCode, Code: http.StatusText(resp.StatusCode), Message: strings.TrimSpace(string(data))}
	case jsonErr != nil || answer.Protection == nil:
		return Protection{}, &Error{Status: resp.StatusCode, Code: "UnreadableAnswer", Message: fmt.Sprintf("%.200q", data)}
	}
	p := Protection{Enabled: answer.Protection.ProtectionEnabled}
	if answer.Protection.ExpirationDate != nil {
		p.Expires = *answer.Protection.ExpirationDate
	}
	return p, nil
}

// EnvMetadataURI is the variable the ECS agent sets to the task metadata endpoint (version 4)
// in every container of a task.
const EnvMetadataURI = "ECS_CONTAINER_METADATA_URI_V4"

// TaskID asks the task metadata endpoint at uri (the value of EnvMetadataURI) for the task's
// ARN, and returns its id: the ARN's last path segment. The call is bounded by timeout.
func TaskID(ctx context.Context, uri string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(uri, "/")+"/task", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("ECS task metadata: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("ECS task metadata: %s", resp.Status)
	}
	var task struct{ TaskARN string }
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&task); err != nil {
		return "", fmt.Errorf("ECS task metadata: %w", err)
	}
	id := task.TaskARN[strings.LastIndex(task.TaskARN, "/")+1:]
	if id == "" {
		return "", errors.New("ECS task metadata: no TaskARN")
	}
	return id, nil
}
