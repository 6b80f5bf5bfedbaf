//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// firstPass is where a faulty drain's first pass went, read from watchbot's log and its
// receive metrics.
type firstPass struct {
	// end is when the last message run on its first receive was done, from watchbot's first
	// log line: the first pass over the queue, which a drain without faults ends in 0.2 s.
	end      time.Duration
	receives int // up to end
	// retried is how long the receives up to end that the SDK retried, or that failed, took:
	// the one receive loop waits them out (a throttled call's retries wait 250 ms and more).
	retried time.Duration
	// extensions is how long the short-lease extensions up to end took, which the receive
	// loop also waits for.
	extensions time.Duration
}

// receiveSample is watchbot's receive metrics at one moment of a drain.
type receiveSample struct {
	at         time.Time
	receives   int
	retried    time.Duration
	extensions time.Duration
}

// scrapeInterval is how often the fault lane reads watchbot's /metrics: the figures up to the
// first pass's end are those of the last scrape before it.
const scrapeInterval = 25 * time.Millisecond

// freeAddr returns a loopback address with a port free a moment ago, for watchbot's
// --http-addr.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// scrapeReceives reads watchbot's receive metrics at addr every scrapeInterval until the
// returned function is called, which stops it and returns the samples. Scrapes that find
// no watchbot (not started yet, or gone) are skipped.
func scrapeReceives(ctx context.Context, addr string) func() []receiveSample {
	ctx, cancel := context.WithCancel(ctx)
	var samples []receiveSample
	var wg sync.WaitGroup
	wg.Go(func() {
		// Straight to watchbot: never through a proxy named by the environment.
		client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: time.Second}
		tick := time.NewTicker(scrapeInterval)
		defer tick.Stop()
		for {
			if s, err := scrapeOnce(ctx, client, "http://"+addr+"/metrics"); err == nil {
				samples = append(samples, s)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() []receiveSample {
		cancel()
		wg.Wait()
		return samples
	}
}

// scrapeOnce reads the receive histograms of one /metrics answer.
func scrapeOnce(ctx context.Context, client *http.Client, url string) (receiveSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return receiveSample{}, err
	}
	at := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return receiveSample{}, err
	}
	defer resp.Body.Close()
	return parseReceiveMetrics(resp.Body, at)
}

// parseReceiveMetrics reads watchbot's receive histograms from a Prometheus text exposition.
func parseReceiveMetrics(r io.Reader, at time.Time) (receiveSample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return receiveSample{}, err
	}
	histogram := func(name string) (count uint64, sum time.Duration) {
		f, ok := families[name]
		if !ok || len(f.GetMetric()) == 0 {
			return 0, 0
		}
		h := f.GetMetric()[0].GetHistogram()
		return h.GetSampleCount(), time.Duration(h.GetSampleSum() * float64(time.Second))
	}
	if _, ok := families["watchbot_receive_duration_seconds"]; !ok {
		return receiveSample{}, fmt.Errorf("no watchbot_receive_duration_seconds in /metrics")
	}
	s := receiveSample{at: at}
	n, _ := histogram("watchbot_receive_duration_seconds")
	s.receives = int(n)
	_, s.retried = histogram("watchbot_receive_retried_duration_seconds")
	_, s.extensions = histogram("watchbot_lease_extension_duration_seconds")
	return s, nil
}

// readFirstPass finds the first pass's end in a drain's JSON log (its "message done" lines
// with their attempt, from the first line's time) and takes the receive metrics up to it
// from samples.
func readFirstPass(log string, samples []receiveSample) firstPass {
	var start, last time.Time
	for _, line := range strings.Split(log, "\n") {
		var e struct {
			Time    time.Time
			Msg     string
			Attempt int
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Time.IsZero() {
			continue
		}
		if start.IsZero() {
			start = e.Time
		}
		if e.Msg == "message done" && e.Attempt == 1 && e.Time.After(last) {
			last = e.Time
		}
	}
	var p firstPass
	if last.IsZero() {
		return p // no message ran on its first receive
	}
	p.end = last.Sub(start)
	for _, s := range samples {
		if s.at.After(last) {
			break
		}
		p.receives, p.retried, p.extensions = s.receives, s.retried, s.extensions
	}
	return p
}

func (p firstPass) String() string {
	return fmt.Sprintf("first pass over %.1f s after watchbot's first log line, %d receives: %.1f s in receives the SDK retried, %.1f s in short-lease extensions",
		p.end.Seconds(), p.receives, p.retried.Seconds(), p.extensions.Seconds())
}
