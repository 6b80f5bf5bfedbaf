package testenv

import "testing"

func TestLogCount(t *testing.T) {
	log := `{"time":"t","level":"WARN","msg":"one","state":"braking","failure_ratio":"1.00","n":3}
not a record
{"time":"t","level":"INFO","msg":"two","state":"open","failure_ratio":"0.10","ok":true}
{"time":"t","level":"INFO","msg":"three","state":"open"}
`
	for _, tc := range []struct {
		attrs []string
		want  int
	}{
		{[]string{"state", "open"}, 2},
		{[]string{"state", "open", "failure_ratio", "*"}, 1},
		{[]string{"level", "WARN", "n", "3"}, 1},
		{[]string{"ok", "true"}, 1},
		{[]string{"state", "recovering"}, 0},
		{[]string{"missing", "*"}, 0},
		{nil, 3},
	} {
		if got := LogCount(log, tc.attrs...); got != tc.want {
			t.Errorf("LogCount(%q) = %d, want %d", tc.attrs, got, tc.want)
		}
	}
}
