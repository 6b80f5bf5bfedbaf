package limits

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"
)

// tokens is what a task holds of one rate limit. Guarded by Limiter.mu.
type tokens struct {
	name     string
	rate     float64
	capacity int
	window   time.Duration
	// chunks are the grants of the table: each usable until its until.
	chunks []chunk
	// settle are the chunks that can no longer be used, whose holds Run has yet to settle.
	settle []chunk
	// demand is the starts refused since Run last fetched.
	demand int
	meter  meter
	// nextTry is when Run may fetch again: after a refusal of the table, when the earliest
	// hold in it lapses.
	nextTry time.Time
	// fallback is the task's own window while it holds to its share of the limit.
	fallback Ledger
	seq      int64
	// validity is how long the last chunk was valid (chunkValidity).
	validity time.Duration
	// bindingUntil: the table had fewer tokens than asked lately, so chunks stay short
	// until then.
	bindingUntil time.Time
	lastUsed     time.Time
}

// chunk is a grant of tokens: n, of which left are unused, usable until until. Its hold in
// the table is named name and counts until holdUntil.
type chunk struct {
	name      string
	n, left   int
	until     time.Time
	holdUntil time.Time
	// lastUse is when the last of its tokens was taken.
	lastUse time.Time
}

// settled is the hold a chunk that can no longer be used needs in the table, and whether
// it needs one: its used tokens only, counting a window (and spawnSlack) from the last use. Every use was
// before the last, so no window holds more starts than the limit; the unused tokens go back.
func (c chunk) settled(window time.Duration) (Hold, bool) {
	used := c.n - c.left
	if used == 0 {
		return Hold{}, false
	}
	return Hold{N: used, Until: c.lastUse.Add(window + spawnSlack)}, true
}

// spawnSlack lengthens a settled hold beyond its window: a job starts when its worker's
// process does, a few milliseconds after the grant, and a later grant's worker may start
// sooner after its grant. The slack keeps the bound for the starts as the workers see them,
// at the cost of 2% of a binding rate.
const spawnSlack = 20 * time.Millisecond

// maxSettled bounds the chunks waiting to be settled in the table; older ones keep the hold
// they were granted, which only costs capacity until it lapses.
const maxSettled = 64

// held is the tokens that may still be used at now.
func (t *tokens) held(now time.Time) int {
	n := 0
	for _, c := range t.chunks {
		if now.Before(c.until) {
			n += c.left
		}
	}
	return n
}

// share is this task's share of the rate in fallback: the rate divided by the live tasks;
// while their number is unknown (0), one start a second, or the rate's own window when it is
// slower.
func (t *tokens) share(live int) (int, time.Duration) {
	r := t.rate / float64(max(live, 1))
	if live == 0 {
		r = min(t.rate, 1)
	}
	return RateCapacity(r), RateWindow(r)
}

// prune moves the chunks that can no longer be used at now (lapsed, or used up) to those
// to settle, and forgets those whose holds lapsed in the table anyway.
func (t *tokens) prune(now time.Time) {
	kept, settle := t.chunks[:0], t.settle[:0]
	for _, c := range t.settle {
		if now.Before(c.holdUntil) {
			settle = append(settle, c)
		}
	}
	for _, c := range t.chunks {
		switch {
		case now.Before(c.until) && c.left > 0:
			kept = append(kept, c)
		case now.Before(c.holdUntil):
			settle = append(settle, c)
		}
	}
	t.chunks = kept
	t.settle = settle[max(len(settle)-maxSettled, 0):]
}

// has reports whether n starts may be taken at now.
func (t *tokens) has(now time.Time, n int, fallback bool, live int) bool {
	n = units(n, t.capacity)
	if t.held(now) >= n {
		return true
	}
	if !fallback {
		return false
	}
	c, _ := t.share(live)
	return t.fallback.Used(now)+units(n, c) <= c
}

// take takes n starts at now; has said yes.
func (t *tokens) take(now time.Time, n int, fallback bool, live int) {
	n = units(n, t.capacity)
	t.meter.add(now, n)
	if t.held(now) < n && fallback {
		c, w := t.share(live)
		t.seq++
		t.fallback = t.fallback.With(now, "fallback/"+strconv.FormatInt(t.seq, 10), Hold{N: units(n, c), Until: now.Add(w)})
		return
	}
	// The chunks are in the order they were granted, so the earliest to lapse go first.
	for i := range t.chunks {
		c := &t.chunks[i]
		if n == 0 || !now.Before(c.until) || c.left == 0 {
			continue
		}
		took := min(n, c.left)
		c.left -= took
		c.lastUse = now
		n -= took
	}
}

// meter estimates a rate of starts from the last two whole seconds.
type meter struct {
	start     time.Time
	cur, prev int
}

func (m *meter) roll(now time.Time) {
	switch d := now.Sub(m.start); {
	case m.start.IsZero():
		m.start = now
	case d >= 2*time.Second:
		m.prev, m.cur, m.start = 0, 0, now
	case d >= time.Second:
		m.prev, m.cur, m.start = m.cur, 0, m.start.Add(time.Second)
	}
}

func (m *meter) add(now time.Time, n int) { m.roll(now); m.cur += n }

// rate is the starts per second of the last second, or of this one if it already has more.
func (m *meter) rate(now time.Time) float64 {
	m.roll(now)
	return float64(max(m.prev, m.cur))
}

// fetch asks the table for tokens: the demand, and with it what the recent rate will use
// while the chunk is valid. In the same write it settles the holds of the chunks in settle.
func (r *caller) fetch(t *tokens, demand, held int, rate float64, binding bool, settle []chunk) call {
	return func(ctx context.Context) {
		l := r.l
		var chunkAt time.Time
		var got, want int
		var name string
		validity := shortValidity
		wrote, err := r.update(ctx, t.name, func(now time.Time, led Ledger) (Ledger, bool) {
			next := led.successor(now)
			settled := settleHolds(next, settle, t.window)
			free := t.capacity - next.Used(now)
			if binding {
				// Only what waits now, used at once.
				validity = shortValidity
				want = tokenWant(demand, held, 0, shortValidity)
			} else {
				validity = chunkValidity(free, rate)
				want = tokenWant(demand, held, rate, validity)
			}
			got = min(want, free)
			if got <= 0 {
				if chunkAt = next.Next(now); chunkAt.IsZero() {
					chunkAt = now.Add(PollInterval)
				}
				return next, settled
			}
			chunkAt = now
			l.mu.Lock()
			t.seq++
			name = l.tag + strconv.FormatInt(t.seq, 36)
			l.mu.Unlock()
			next.Holds[name] = Hold{N: got, Until: now.Add(t.window + validity)}
			return next, true
		})
		now := l.now()
		l.mu.Lock()
		if wrote {
			t.settle = slices.DeleteFunc(t.settle, func(c chunk) bool {
				return slices.ContainsFunc(settle, func(s chunk) bool { return s.name == c.name })
			})
		}
		switch {
		case err != nil:
			t.nextTry = now.Add(r.retryDelay())
		case got <= 0:
			// The table has none to spare until its earliest hold lapses.
			t.nextTry = chunkAt
			t.bindingUntil = now.Add(2 * t.window)
		case !wrote:
			// Other tasks wrote first, every time: ask again in a moment.
			t.nextTry = now.Add(minGap)
		default:
			t.chunks = append(t.chunks, chunk{name: name, n: got, left: got, until: chunkAt.Add(validity),
				holdUntil: chunkAt.Add(t.window + validity)})
			t.demand = 0
			t.validity = validity
			if got < want {
				t.bindingUntil = now.Add(2 * t.window)
			}
		}
		l.mu.Unlock()
		r.done(err)
		if wrote && got > 0 {
			signal(l.changed)
		}
	}
}

// settleHolds replaces in next the holds of the chunks in settle by what they need now
// (chunk.settled), and reports whether it changed any.
func settleHolds(next Ledger, settle []chunk, window time.Duration) bool {
	changed := false
	for _, c := range settle {
		h, ok := next.Holds[c.name]
		if !ok {
			continue
		}
		s, keep := c.settled(window)
		switch {
		case !keep:
			delete(next.Holds, c.name)
		case s.Until.Before(h.Until) || s.N < h.N:
			next.Holds[c.name] = Hold{N: min(s.N, h.N), Until: earlier(s.Until, h.Until)}
		default:
			continue
		}
		changed = true
	}
	return changed
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// chunkValidity is how long a chunk may be used, given the tokens free in the table and the
// task's recent rate: long enough that the chunk is about half of what is free, between
// shortValidity and longValidity. Every token counts in the table for its validity beyond
// RateWindow, so long chunks are worth it only far from the limit; close to it, chunks are
// short and hold only the starts that wait now.
func chunkValidity(free int, rate float64) time.Duration {
	if rate <= 0 || free <= 0 {
		return shortValidity
	}
	v := time.Duration(float64(free) / 2 / rate * float64(time.Second))
	return min(max(v, shortValidity), longValidity)
}

// tokenWant is how many tokens to ask for: the refused demand, plus what the recent rate
// uses in validity, less what is held; at least one when a start waits.
func tokenWant(demand, held int, rate float64, validity time.Duration) int {
	w := demand + int(math.Floor(rate*validity.Seconds())) - held
	if demand > 0 {
		w = max(w, 1)
	}
	return max(w, 0)
}
