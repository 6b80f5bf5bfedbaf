package faultproxy

import (
	"slices"
	"testing"
	"time"
)

// decisions runs ops through p.decide, one every step from the rules' start, and returns
// the fault of each ("" for none).
func decisions(p *Proxy, ops []string, step time.Duration) []Fault {
	start := time.Unix(1000, 0)
	p.rules.since = start
	out := make([]Fault, len(ops))
	for i, op := range ops {
		out[i] = p.decide(op, start.Add(time.Duration(i)*step)).fault
	}
	return out
}

func repeat(op string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = op
	}
	return out
}

func mustNew(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := New("http://127.0.0.1:1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestDecideSchedule(t *testing.T) {
	const E = ServerError
	tests := []struct {
		name  string
		rules []Rule
		ops   []string
		step  time.Duration
		want  []Fault
	}{
		{
			name:  "rate 1 faults every matching request",
			rules: []Rule{{Operations: []string{"DeleteMessage"}, Fault: E, Rate: 1}},
			ops:   []string{"DeleteMessage", "ReceiveMessage", "DeleteMessage", NoTarget},
			want:  []Fault{E, "", E, ""},
		},
		{
			name:  "rate 0 never faults",
			rules: []Rule{{Operations: []string{"*"}, Fault: E, Rate: 0}},
			ops:   repeat("ReceiveMessage", 5),
			want:  []Fault{"", "", "", "", ""},
		},
		{
			name:  "the wildcard matches every request",
			rules: []Rule{{Operations: []string{"*"}, Fault: E, Rate: 1}},
			ops:   []string{"ReceiveMessage", "CreateQueue", NoTarget},
			want:  []Fault{E, E, E},
		},
		{
			name:  "After and For count matching requests only",
			rules: []Rule{{Operations: []string{"SendMessage"}, Fault: E, Rate: 1, After: 2, For: 2}},
			ops:   []string{"SendMessage", "ReceiveMessage", "SendMessage", "SendMessage", "ReceiveMessage", "SendMessage", "SendMessage"},
			want:  []Fault{"", "", "", E, "", E, ""},
		},
		{
			name:  "a time window turns the rule on and off",
			rules: []Rule{{Operations: []string{"*"}, Fault: E, Rate: 1, From: 2 * time.Second, Until: 4 * time.Second}},
			ops:   repeat("ReceiveMessage", 6),
			step:  time.Second,
			want:  []Fault{"", "", E, E, "", ""},
		},
		{
			name:  "After counts from the opening of the time window",
			rules: []Rule{{Operations: []string{"*"}, Fault: E, Rate: 1, From: 2 * time.Second, After: 1, For: 1}},
			ops:   repeat("ReceiveMessage", 5),
			step:  time.Second,
			want:  []Fault{"", "", "", E, ""},
		},
		{
			name: "the first rule that faults wins",
			rules: []Rule{
				{Operations: []string{"*"}, Fault: Throttle, Rate: 1, For: 1},
				{Operations: []string{"*"}, Fault: E, Rate: 1},
			},
			ops:  repeat("ReceiveMessage", 3),
			want: []Fault{Throttle, E, E},
		},
		{
			name: "a request faulted by an earlier rule still counts for later ones",
			rules: []Rule{
				{Operations: []string{"*"}, Fault: Throttle, Rate: 1, For: 2},
				{Operations: []string{"*"}, Fault: E, Rate: 1, After: 2, For: 1},
			},
			ops:  repeat("ReceiveMessage", 4),
			want: []Fault{Throttle, Throttle, E, ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, Config{Rules: tt.rules, Seed: 1})
			if got := decisions(p, tt.ops, tt.step); !slices.Equal(got, tt.want) {
				t.Fatalf("faults = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecideIsDeterministic(t *testing.T) {
	rules := []Rule{
		{Operations: []string{"ReceiveMessage"}, Fault: ServerError, Rate: 0.2},
		{Operations: []string{"*"}, Fault: Throttle, Rate: 0.1},
		{Operations: []string{"DeleteMessage"}, Fault: DropAfter, Rate: 0.3},
	}
	ops := make([]string, 300)
	for i := range ops {
		ops[i] = []string{"ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility"}[i%3]
	}
	a := decisions(mustNew(t, Config{Rules: rules, Seed: 7}), ops, 0)
	b := decisions(mustNew(t, Config{Rules: rules, Seed: 7}), ops, 0)
	c := decisions(mustNew(t, Config{Rules: rules, Seed: 8}), ops, 0)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different faults:\n%q\n%q", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 7 and 8 gave the same %d faults", len(a))
	}
	n := 0
	for _, f := range a {
		if f != "" {
			n++
		}
	}
	// Expected: 100·(0.2 + 0.8·0.1) + 100·(0.1 + 0.9·0.3) + 100·0.1 = 75.
	if n < 45 || n > 105 {
		t.Fatalf("%d faults in 300 requests, want about 75", n)
	}
}

func TestSetRulesRestartsCounters(t *testing.T) {
	p := mustNew(t, Config{Rules: []Rule{{Operations: []string{"*"}, Fault: ServerError, Rate: 1, For: 1}}})
	if got := decisions(p, repeat("SendMessage", 2), 0); !slices.Equal(got, []Fault{ServerError, ""}) {
		t.Fatalf("before SetRules: %q", got)
	}
	if err := p.SetRules([]Rule{{Operations: []string{"*"}, Fault: Throttle, Rate: 1, For: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := decisions(p, repeat("SendMessage", 2), 0); !slices.Equal(got, []Fault{Throttle, ""}) {
		t.Fatalf("after SetRules: %q", got)
	}
	if err := p.SetRules([]Rule{{Operations: []string{"Nope"}, Fault: Throttle, Rate: 1}}); err == nil {
		t.Fatal("SetRules accepted an unknown operation")
	}
}
