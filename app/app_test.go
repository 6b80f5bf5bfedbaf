package app

import (
	"strings"
	"testing"
)

func TestScaleInProtection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, uri string
		want      bool   // an agent client
		err       string // part of the error, "" for none
	}{
		{mode: "auto", uri: "", want: false},
		{mode: "auto", uri: "http://169.254.170.2/api/abc", want: true},
		{mode: "on", uri: "http://169.254.170.2/api/abc", want: true},
		{mode: "on", uri: "", err: "needs ECS_AGENT_URI"},
		{mode: "off", uri: "http://169.254.170.2/api/abc", want: false},
		{mode: "auto", uri: "169.254.170.2", err: "is not an http URL"},
		{mode: "yes", err: `ScaleInProtection ("yes") must be auto, on or off`},
	} {
		api, err := ScaleInProtection(tc.mode, tc.uri)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s with %q: error %v, want %q", tc.mode, tc.uri, err, tc.err)
			}
			continue
		}
		if err != nil || (api != nil) != tc.want {
			t.Errorf("%s with %q: (%v, %v), want client %v", tc.mode, tc.uri, api, err, tc.want)
		}
	}
}
