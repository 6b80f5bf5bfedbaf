package setting

import (
	"errors"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	const (
		heartbeat  Name = "HeartbeatInterval"
		visibility Name = "VisibilityTimeout"
	)
	flags := func(s Name) string {
		return map[Name]string{heartbeat: "--hb", visibility: "--vt", QueueURL: "--q"}[s]
	}
	tests := []struct {
		name string
		err  Error
		want string
	}{
		{"value and a reference", Refuse(heartbeat, 2*time.Minute, "must be shorter than "+Ref(visibility)+" (1m0s)"),
			"--hb (2m0s) must be shorter than --vt (1m0s)"},
		{"no value", Refuse(QueueURL, nil, "is required"), "--q: is required"},
		{"a string value is quoted", Refuse(QueueURL, "", "is required"), `--q ("") is required`},
		{"no setting", Refuse("", nil, "no worker command"), "no worker command"},
		{"unknown braces are left alone", Refuse("", nil, "{not a setting}"), "{not a setting}"},
		{"a setting's name the user typed is left alone", Refuse(QueueURL, nil, "bad pattern {VisibilityTimeout}: "+Ref(heartbeat)),
			"--q: bad pattern {VisibilityTimeout}: --hb"},
		{"a failed call", Error{Setting: QueueURL, Reason: "queue not reachable", Err: errors.New("timeout")}, "--q: queue not reachable: timeout"},
		{"a failed call alone", Error{Setting: QueueURL, Err: errors.New("timeout")}, "--q: timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Render(flags); got != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
		})
	}
	if got, want := Refuse(heartbeat, time.Minute, "must be shorter than "+Ref(visibility)+" (1m0s)").Error(), "HeartbeatInterval (1m0s) must be shorter than VisibilityTimeout (1m0s)"; got != want {
		t.Errorf("Error = %q, want %q (the settings' own names)", got, want)
	}
}
