package worker

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadDirective(t *testing.T) {
	tests := []struct {
		name    string
		content *string
		want    *Directive
		wantErr bool
	}{
		{"missing file", nil, nil, false},
		{"empty file", ptr(""), nil, false},
		{"ack", ptr(`{"action":"ack"}`), &Directive{Action: "ack"}, false},
		{"retry with delay", ptr(`{"action":"retry","delaySeconds":12}`), &Directive{Action: "retry", DelaySeconds: f64(12)}, false},
		{"dead-letter", ptr(`{"action":"dead-letter","reason":"nope"}` + "\n"), &Directive{Action: "dead-letter", Reason: "nope"}, false},
		{"unknown action", ptr(`{"action":"maybe"}`), nil, true},
		{"negative delay", ptr(`{"action":"retry","delaySeconds":-1}`), nil, true},
		{"delay above 12h", ptr(`{"action":"retry","delaySeconds":43201}`), nil, true},
		{"not json", ptr(`ack`), nil, true},
		{"truncated", ptr(`{"action":"ack"`), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "result.json")
			if tt.content != nil {
				if err := os.WriteFile(p, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, found, err := readDirective(p)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if found != (tt.content != nil) {
				t.Fatalf("found = %v with a file %v", found, tt.content != nil)
			}
			if (got == nil) != (tt.want == nil) || got != nil && (got.Action != tt.want.Action || got.Reason != tt.want.Reason ||
				(got.DelaySeconds == nil) != (tt.want.DelaySeconds == nil) || got.DelaySeconds != nil && *got.DelaySeconds != *tt.want.DelaySeconds) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func ptr(s string) *string   { return &s }
func f64(v float64) *float64 { return &v }
