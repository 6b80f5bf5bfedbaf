package ecsagent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/testing/fakeagent"
)

func TestSetProtection(t *testing.T) {
	agent := fakeagent.Start()
	defer agent.Close()
	c := ecsagent.New(agent.URI(), time.Second)

	p, err := c.SetProtection(t.Context(), true, 150*time.Second)
	if err != nil || !p.Enabled || p.Expires.IsZero() {
		t.Fatalf("protect = %+v, %v", p, err)
	}
	if calls := agent.Calls(); len(calls) != 1 || calls[0].Minutes != 3 || !calls[0].Enabled {
		t.Fatalf("calls %+v, want one protect for 3 minutes (150 s rounded up)", calls)
	}
	if !agent.Protected() {
		t.Fatal("the agent does not see the task protected")
	}
	if p, err := c.SetProtection(t.Context(), false, 0); err != nil || p.Enabled {
		t.Fatalf("unprotect = %+v, %v", p, err)
	}
	if calls := agent.Calls(); calls[1].Minutes != 0 || calls[1].Enabled || agent.Protected() {
		t.Fatalf("unprotect sent %+v; protected %v", calls[1], agent.Protected())
	}
	// Expiry is clamped to what the agent accepts.
	if _, err := c.SetProtection(t.Context(), true, 100*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetProtection(t.Context(), true, time.Second); err != nil {
		t.Fatal(err)
	}
	if calls := agent.Calls(); calls[2].Minutes != 2880 || calls[3].Minutes != 1 {
		t.Fatalf("expiries sent %d and %d, want 2880 and 1", calls[2].Minutes, calls[3].Minutes)
	}
}

func TestSetProtectionFailures(t *testing.T) {
	tests := []struct {
		name   string
		fault  fakeagent.Fault
		status int
		code   string
	}{
		{"server error", fakeagent.Status, 500, "ServerException"},
		{"failure body", fakeagent.Failure, 200, "MISSING"},
		{"standalone task", fakeagent.NotInService, 200, "TASK_NOT_VALID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agent := fakeagent.Start()
			defer agent.Close()
			agent.SetFault(tt.fault)
			_, err := ecsagent.New(agent.URI(), time.Second).SetProtection(t.Context(), true, time.Minute)
			var e *ecsagent.Error
			if !errors.As(err, &e) || e.Status != tt.status || e.Code != tt.code {
				t.Fatalf("err = %v, want status %d code %s", err, tt.status, tt.code)
			}
		})
	}
	t.Run("hang", func(t *testing.T) {
		agent := fakeagent.Start()
		defer agent.Close()
		agent.SetFault(fakeagent.Hang)
		start := time.Now()
		_, err := ecsagent.New(agent.URI(), 200*time.Millisecond).SetProtection(context.Background(), true, time.Minute)
		if err == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("err = %v after %v, want a timeout", err, time.Since(start))
		}
	})
	t.Run("refused", func(t *testing.T) {
		agent := fakeagent.Start()
		uri := agent.URI()
		agent.Close()
		if _, err := ecsagent.New(uri, time.Second).SetProtection(t.Context(), true, time.Minute); err == nil {
			t.Fatal("no error from a closed agent")
		}
	})
}

func TestTaskID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
		fails      bool
	}{
		{"a task ARN", `{"Cluster":"c","TaskARN":"arn:aws:ecs:us-east-1:123456789012:task/c/5e1f8ab0c2d94e7b"}`, 200, "5e1f8ab0c2d94e7b", false},
		{"no ARN", `{}`, 200, "", true},
		{"an error", `oops`, 500, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v4/abc/task" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			id, err := ecsagent.TaskID(t.Context(), srv.URL+"/v4/abc", time.Second)
			if id != tc.want || (err != nil) != tc.fails {
				t.Errorf("TaskID = %q, %v; want %q (fails: %v)", id, err, tc.want, tc.fails)
			}
		})
	}
}
