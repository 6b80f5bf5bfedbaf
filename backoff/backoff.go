// Package backoff computes how long a failed message waits before its next attempt. Policies
// are pure: the attempt number and, for jitter, a random number go in, a duration comes out.
// Whether to retry at all is decided elsewhere (the supervisor's outcome table).
package backoff

import (
	"fmt"
	"time"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// Jitter selects how a delay is randomised.
type Jitter string

// The jitter modes of --backoff-jitter.
const (
	// None uses the exponential delay as it is.
	None Jitter = "none"
	// Full picks uniformly in [0, d]: the best spread, some retries come back almost at once.
	Full Jitter = "full"
	// Equal picks uniformly in [d/2, d]: a spread that still waits at least half the delay.
	Equal Jitter = "equal"
)

// ParseJitter parses a --backoff-jitter value.
func ParseJitter(s string) (Jitter, error) {
	switch j := Jitter(s); j {
	case None, Full, Equal:
		return j, nil
	}
	return "", fmt.Errorf("unknown jitter %q (want none, full or equal)", s)
}

// Exponential is the delay policy: after failed attempt n the message waits
//
//	clamp(jitter(Base·2^(n−1)), Min, Max)
//
// With the defaults (Base 2s, Min 0, Max 12h, no jitter), Watchbot's table:
//
//	attempt n   1   2   3   4    5    6    7     8     9     10    ...  15       16+
//	delay       2s  4s  8s  16s  32s  64s  128s  256s  512s  1024s ...  9h6m8s   12h (Max)
//
// Attempts below 1 are treated as 1. Doubling stops at Max, so attempt 63 or 128 cannot
// overflow: they wait Max.
type Exponential struct {
	Base   time.Duration
	Min    time.Duration
	Max    time.Duration
	Jitter Jitter
}

// Default returns the policy of `watchbot listen` without backoff flags.
func Default() Exponential {
	return Exponential{Base: 2 * time.Second, Min: 0, Max: sqsspec.MaxInFlight, Jitter: None}
}

// Validate reports settings that cannot produce a sensible delay, as a setting.Error
// naming the setting.
func (p Exponential) Validate() error {
	switch {
	case p.Base <= 0:
		return setting.Refuse(listenspec.SettingBackoffBase, p.Base, "must be positive")
	case p.Min < 0:
		return setting.Refuse(listenspec.SettingBackoffMin, p.Min, "must not be negative")
	case p.Max <= 0 || p.Max > sqsspec.MaxInFlight:
		return setting.Refuse(listenspec.SettingBackoffMax, p.Max, "must be between 1s and 12h (SQS's longest visibility timeout)")
	case p.Min > p.Max:
		return setting.Refuse(listenspec.SettingBackoffMin, p.Min, fmt.Sprintf("must not exceed %s (%v)", setting.Ref(listenspec.SettingBackoffMax), p.Max))
	}
	_, err := ParseJitter(string(p.Jitter))
	if err != nil {
		return setting.Refuse(listenspec.SettingBackoffJitter, nil, err.Error())
	}
	return nil
}

// Delay returns the wait after failed attempt n. random must return a number in [0, 1); it
// is called once for Full and Equal jitter and never for None (it may then be nil).
func (p Exponential) Delay(attempt int, random func() float64) time.Duration {
	d := p.exponential(attempt)
	switch p.Jitter {
	case Full:
		d = time.Duration(random() * float64(d))
	case Equal:
		half := d / 2
		d = half + time.Duration(random()*float64(d-half))
	}
	return min(max(d, p.Min), p.Max)
}

// exponential returns Base·2^(attempt−1), capped at Max without overflowing.
func (p Exponential) exponential(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < attempt; i++ {
		if d >= p.Max/2 {
			return p.Max
		}
		d *= 2
	}
	return min(d, p.Max)
}
