package listenspec

import (
	"errors"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	flags := func(s Setting) string {
		return map[Setting]string{SettingHeartbeatInterval: "--hb", SettingVisibilityTimeout: "--vt", SettingQueueURL: "--q"}[s]
	}
	tests := []struct {
		name string
		err  Error
		want string
	}{
		{"value and a reference", Refuse(SettingHeartbeatInterval, 2*time.Minute, "must be shorter than "+Ref(SettingVisibilityTimeout)+" (1m0s)"),
			"--hb (2m0s) must be shorter than --vt (1m0s)"},
		{"no value", Refuse(SettingQueueURL, nil, "is required"), "--q: is required"},
		{"a string value is quoted", Refuse(SettingQueueURL, "", "is required"), `--q ("") is required`},
		{"no setting", Refuse("", nil, "no worker command"), "no worker command"},
		{"unknown braces are left alone", Refuse("", nil, "{not a setting}"), "{not a setting}"},
		{"a setting's name the user typed is left alone", Refuse(SettingQueueURL, nil, "bad pattern {VisibilityTimeout}: "+Ref(SettingHeartbeatInterval)),
			"--q: bad pattern {VisibilityTimeout}: --hb"},
		{"a failed call", Error{Setting: SettingQueueURL, Reason: "queue not reachable", Err: errors.New("timeout")}, "--q: queue not reachable: timeout"},
		{"a failed call alone", Error{Setting: SettingQueueURL, Err: errors.New("timeout")}, "--q: timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Render(flags); got != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
		})
	}
	if got, want := Lease(time.Minute, time.Minute).Error(), "HeartbeatInterval (1m0s) must be shorter than VisibilityTimeout (1m0s)"; got != want {
		t.Errorf("Error = %q, want %q (the settings' own names)", got, want)
	}
}
