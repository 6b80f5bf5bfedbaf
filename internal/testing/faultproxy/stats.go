package faultproxy

import "maps"

// Stats counts what the proxy saw and did.
type Stats struct {
	// Operations maps an SQS operation name (or NoTarget) to its counts.
	Operations map[string]OperationStats
	// Active is the number of requests being handled right now.
	Active int
}

// OperationStats counts the requests of one operation.
type OperationStats struct {
	// Requests received, including SDK retries (each attempt is a request).
	Requests int
	// Forwarded to upstream: untouched requests and those delayed, stalled or DropAfter'd.
	Forwarded int
	// Faults injected, by kind.
	Faults map[Fault]int
	// HeldAnswers counts upstream answers held back by a stall.
	HeldAnswers int
	// UpstreamErrors counts forwarded requests that upstream failed to answer (not
	// injected: the proxy answered 502).
	UpstreamErrors int
}

// Injected is the number of faults injected, of any kind.
func (o OperationStats) Injected() int {
	n := 0
	for _, c := range o.Faults {
		n += c
	}
	return n
}

// Total sums the counts of every operation.
func (s Stats) Total() OperationStats {
	t := OperationStats{Faults: map[Fault]int{}}
	for _, o := range s.Operations {
		t.Requests += o.Requests
		t.Forwarded += o.Forwarded
		t.HeldAnswers += o.HeldAnswers
		t.UpstreamErrors += o.UpstreamErrors
		for f, c := range o.Faults {
			t.Faults[f] += c
		}
	}
	return t
}

// Stats returns a copy of the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Operations: make(map[string]OperationStats, len(p.ops)), Active: p.active}
	for op, o := range p.ops {
		c := *o
		c.Faults = maps.Clone(o.Faults)
		s.Operations[op] = c
	}
	return s
}
