// Package fakeagent is an Amazon ECS container agent's task scale-in protection endpoint for
// tests: a real HTTP server answering PUT and GET on .../task-protection/v1/state as the
// agent does ("Amazon ECS task scale-in protection endpoint" in the Amazon ECS Developer
// Guide; the agent's handler, aws/amazon-ecs-agent ecs-agent/tmds/handlers/taskprotection/v1):
// a request body with exactly ProtectionEnabled (required) and ExpiresInMinutes (1..2880,
// default 120), 200 {"protection": {...}} on success, 400 {"error": {...}} for a bad request.
// Faults make it answer 500 with an error, 200 with a failure, or not at all; every call is
// recorded.
package fakeagent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Fault is how the agent answers.
type Fault int

// The faults.
const (
	OK           Fault = iota
	Status             // 500 with {"error": {"Code": "ServerException", ...}}
	Failure            // 200 with {"failure": {"Reason": "MISSING", ...}}, as ECS answers for a task it cannot find
	NotInService       // 200 with {"failure": {"Reason": "TASK_NOT_VALID", ...}}, as ECS answers for a standalone task
	Hang               // no answer until the request's context ends
)

// Call is one PUT the agent answered (or, with a fault, refused).
type Call struct {
	At      time.Time
	Enabled bool
	Minutes int64 // ExpiresInMinutes as sent, 0 when absent
	Fault   Fault
}

// Agent is the fake endpoint.
type Agent struct {
	srv *httptest.Server

	mu        sync.Mutex
	grant     time.Duration
	fault     Fault
	calls     []Call
	protected bool
	expires   time.Time
}

// Start serves a new agent on 127.0.0.1. URI is what ECS_AGENT_URI holds for it.
func Start() *Agent {
	a := &Agent{}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

// URI is the value of ECS_AGENT_URI for a container of the fake task.
func (a *Agent) URI() string { return a.srv.URL + "/api/0123456789abcdef-container" }

// Close stops the server; requests under way are cut.
func (a *Agent) Close() {
	a.srv.CloseClientConnections()
	a.srv.Close()
}

// SetFault makes the next calls answer with f.
func (a *Agent) SetFault(f Fault) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fault = f
}

// SetGrant makes protection last d instead of the minutes asked. The agent grants whole
// minutes; a test grants seconds to see renewals without waiting for minutes.
func (a *Agent) SetGrant(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.grant = d
}

// Calls returns the PUTs so far.
func (a *Agent) Calls() []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Call(nil), a.calls...)
}

// Protected reports whether the task is protected now (as ECS sees it: until expiry).
func (a *Agent) Protected() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.protected && time.Now().Before(a.expires)
}

const taskARN = "arn:aws:ecs:us-east-1:000000000000:task/watchbot/0123456789abcdef"

func (a *Agent) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/task-protection/v1/state") {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	fault := a.fault
	a.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		a.answer(w)
		return
	case http.MethodPut:
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var req struct {
		ProtectionEnabled *bool
		ExpiresInMinutes  *int64
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.ProtectionEnabled == nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{
			"Arn": taskARN, "Code": "InvalidParameterException", "Message": "Invalid request: does not contain 'ProtectionEnabled' field"}})
		return
	}
	call := Call{At: time.Now(), Enabled: *req.ProtectionEnabled, Fault: fault}
	if req.ExpiresInMinutes != nil {
		call.Minutes = *req.ExpiresInMinutes
	}
	a.mu.Lock()
	a.calls = append(a.calls, call)
	a.mu.Unlock()
	switch fault {
	case Status:
		writeJSON(w, http.StatusInternalServerError, map[string]any{"requestID": "r-1", "error": map[string]string{
			"Arn": taskARN, "Code": "ServerException", "Message": "Unexpected error occurred"}})
		return
	case Failure:
		writeJSON(w, http.StatusOK, map[string]any{"failure": map[string]string{
			"Arn": taskARN, "Reason": "MISSING", "Detail": "The specified task wasn't found"}})
		return
	case NotInService:
		writeJSON(w, http.StatusOK, map[string]any{"failure": map[string]string{
			"Arn": taskARN, "Reason": "TASK_NOT_VALID", "Detail": "The task is not part of a service"}})
		return
	case Hang:
		<-r.Context().Done()
		return
	}
	minutes := int64(120)
	if req.ExpiresInMinutes != nil {
		minutes = *req.ExpiresInMinutes
	}
	if minutes < 1 || minutes > 2880 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{
			"Arn": taskARN, "Code": "InvalidParameterException", "Message": "expiresInMinutes must be between 1 and 2880"}})
		return
	}
	a.mu.Lock()
	a.protected = *req.ProtectionEnabled
	grant := time.Duration(minutes) * time.Minute
	if a.grant > 0 {
		grant = a.grant
	}
	a.expires = time.Now().Add(grant)
	a.mu.Unlock()
	a.answer(w)
}

func (a *Agent) answer(w http.ResponseWriter) {
	a.mu.Lock()
	p := map[string]any{"ProtectionEnabled": a.protected && time.Now().Before(a.expires), "TaskArn": taskARN}
	if a.protected {
		p["ExpirationDate"] = a.expires.UTC().Format(time.RFC3339Nano)
	}
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"protection": p})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
