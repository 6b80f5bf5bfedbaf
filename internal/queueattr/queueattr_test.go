package queueattr

import (
	"testing"
)

func TestParseRedrivePolicy(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    RedrivePolicy
		wantErr bool
	}{
		{"string count", `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":"5"}`, RedrivePolicy{"arn:aws:sqs:us-east-1:1:dlq", 5}, false},
		{"number count", `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":10}`, RedrivePolicy{"arn:aws:sqs:us-east-1:1:dlq", 10}, false},
		{"zero count", `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":0}`, RedrivePolicy{}, true},
		{"no target", `{"maxReceiveCount":3}`, RedrivePolicy{}, true},
		{"not json", `{`, RedrivePolicy{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRedrivePolicy(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestURLHelpers(t *testing.T) {
	u := "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs"
	if got := NameFromURL(u); got != "jobs" {
		t.Errorf("NameFromURL = %q", got)
	}
	if got := RegionFromURL(u); got != "eu-west-1" {
		t.Errorf("RegionFromURL = %q", got)
	}
	if got := RegionFromURL("http://127.0.0.1:4566/000000000000/jobs"); got != "" {
		t.Errorf("RegionFromURL(local) = %q", got)
	}
	for _, bad := range []string{"", "jobs", "ftp://x/y", "https://sqs.x.amazonaws.com/"} {
		if ValidateURL(bad) == nil {
			t.Errorf("ValidateURL(%q) accepted", bad)
		}
	}
	if err := ValidateURL(u); err != nil {
		t.Errorf("ValidateURL(%q): %v", u, err)
	}
}
