package alarms

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"
)

// PutMetricData's limits: 1,000 datums and 1 MB per request.
const (
	maxDatumsPerRequest = 1000
	maxRequestBytes     = 1_000_000
)

// rejectedCodes are the errors with which CloudWatch refuses the data itself: sending the same
// datums again cannot succeed, so they are dropped (and logged) instead of buffered. The
// protocol gives the modelled names (…Exception); AWS Query's names are kept for compatibility.
var rejectedCodes = []string{
	"InvalidParameterValueException", "InvalidParameterCombinationException", "MissingRequiredParameterException",
	"InvalidParameterValue", "InvalidParameterCombination", "MissingParameter",
}

// datum is one MetricDatum with what the publisher needs to split requests and report drops.
type datum struct {
	types.MetricDatum
	metric  Metric
	primary bool // carries the full dimension set (not the alarms' roll-up), so sums count once
	size    int  // upper bound of its encoded size
}

// batch is one window's datums that CloudWatch has not taken yet.
type batch struct {
	at     time.Time
	datums []datum
}

// putCloudWatch queues the window's datums behind earlier unsent ones and sends them all, oldest
// first, until a call fails. What was not sent stays buffered for the next flush. Its caller
// holds the flushing token.
func (p *Publisher) putCloudWatch(ctx context.Context, now time.Time, window map[Metric]*aggregate) error {
	if len(window) > 0 {
		p.pending = append(p.pending, batch{at: now, datums: p.datums(now, window)})
	}
	for len(p.pending) > p.cfg.MaxBufferedWindows {
		p.drop(p.pending[0].datums, fmt.Sprintf("CloudWatch did not take them within %d flushes", p.cfg.MaxBufferedWindows), nil)
		p.pending = p.pending[1:]
	}
	var queue []datum
	for _, b := range p.pending {
		queue = append(queue, b.datums...)
	}
	if len(queue) == 0 {
		return nil
	}
	done, err := p.send(ctx, queue)
	for done > 0 {
		n := min(done, len(p.pending[0].datums))
		p.pending[0].datums = p.pending[0].datums[n:]
		done -= n
		if len(p.pending[0].datums) == 0 {
			p.pending = p.pending[1:]
		}
	}
	if err != nil {
		p.log.Warn("publish metrics to CloudWatch; keeping them for the next flush", "error", err,
			"buffered_windows", len(p.pending), "max_buffered_windows", p.cfg.MaxBufferedWindows)
	}
	return err
}

// send puts ds in requests within PutMetricData's limits, in order, and returns how many datums
// were dealt with (accepted, or rejected as invalid and dropped) before the first failure.
func (p *Publisher) send(ctx context.Context, ds []datum) (int, error) {
	done := 0
	for _, req := range splitRequests(ds, maxDatumsPerRequest, maxRequestBytes-64-len(p.cfg.Namespace)) {
		in := &cloudwatch.PutMetricDataInput{
			Namespace:  aws.String(p.cfg.Namespace),
			MetricData: make([]types.MetricDatum, len(req)),
		}
		for i, d := range req {
			in.MetricData[i] = d.MetricDatum
		}
		_, err := p.cfg.CloudWatch.PutMetricData(ctx, in)
		var apiErr smithy.APIError
		switch {
		case err == nil:
			p.published.Add(int64(len(req)))
		case errors.As(err, &apiErr) && slices.Contains(rejectedCodes, apiErr.ErrorCode()):
			p.failures.Add(1)
			p.drop(req, "CloudWatch rejected them", err)
		default:
			p.failures.Add(1)
			return done, fmt.Errorf("put metric data: %w", err)
		}
		done += len(req)
	}
	return done, nil
}

// splitRequests cuts ds into runs of at most maxDatums datums and maxBytes estimated bytes.
func splitRequests(ds []datum, maxDatums, maxBytes int) [][]datum {
	var out [][]datum
	start, size := 0, 0
	for i, d := range ds {
		if i > start && (i-start == maxDatums || size+d.size > maxBytes) {
			out = append(out, ds[start:i])
			start, size = i, 0
		}
		size += d.size
	}
	if start < len(ds) {
		out = append(out, ds[start:])
	}
	return out
}

// datums turns a window into one datum per metric and dimension set: the exact values and
// their counts while the window holds at most 150 distinct values, else its statistic set.
func (p *Publisher) datums(now time.Time, window map[Metric]*aggregate) []datum {
	var out []datum
	for _, m := range sortedKeys(window) {
		a := window[m]
		def, _ := Lookup(m)
		for i, dims := range p.dimSets {
			d := types.MetricDatum{
				MetricName: aws.String(string(m)),
				Unit:       types.StandardUnit(def.Unit),
				Timestamp:  aws.Time(now),
				Dimensions: make([]types.Dimension, len(dims)),
			}
			for j, dim := range dims {
				d.Dimensions[j] = types.Dimension{Name: aws.String(dim.Name), Value: aws.String(dim.Value)}
			}
			if a.exact() {
				d.Values, d.Counts = a.valueCounts()
			} else {
				d.StatisticValues = &types.StatisticSet{
					SampleCount: aws.Float64(a.count), Sum: aws.Float64(a.sum),
					Minimum: aws.Float64(a.min), Maximum: aws.Float64(a.max),
				}
			}
			out = append(out, datum{MetricDatum: d, metric: m, primary: i == 0, size: datumSize(d)})
		}
	}
	return out
}

// datumSize is an upper bound of d's CBOR encoding: field names, map and array headers, the
// unit, the timestamp and the statistic set stay under 256 bytes; each string adds its length
// and a header of at most 9 bytes, each value or count 9 bytes.
func datumSize(d types.MetricDatum) int {
	size := 256 + len(aws.ToString(d.MetricName)) + 9
	for _, dim := range d.Dimensions {
		size += 32 + len(aws.ToString(dim.Name)) + len(aws.ToString(dim.Value))
	}
	return size + 9*(len(d.Values)+len(d.Counts))
}

// drop gives up on ds: it counts them and logs, per metric, the samples and the sum lost.
func (p *Publisher) drop(ds []datum, reason string, err error) {
	if len(ds) == 0 {
		return
	}
	p.dropped.Add(int64(len(ds)))
	sums, samples := make(map[Metric]float64), make(map[Metric]float64)
	for _, d := range ds {
		if !d.primary {
			continue
		}
		n, s := datumTotals(d.MetricDatum)
		samples[d.metric] += n
		sums[d.metric] += s
	}
	var lost []any
	for _, m := range sortedKeys(sums) {
		lost = append(lost, slog.Group(string(m), "samples", samples[m], "sum", sums[m]))
	}
	args := []any{"reason", reason, "datums", len(ds), slog.Group("lost", lost...)}
	if err != nil {
		args = append(args, "error", err)
	}
	p.log.Error("metrics dropped", args...)
}

// datumTotals returns a datum's sample count and sum.
func datumTotals(d types.MetricDatum) (samples, sum float64) {
	if s := d.StatisticValues; s != nil {
		return aws.ToFloat64(s.SampleCount), aws.ToFloat64(s.Sum)
	}
	for i, v := range d.Values {
		c := 1.0
		if i < len(d.Counts) {
			c = d.Counts[i]
		}
		samples += c
		sum += v * c
	}
	return samples, sum
}

// dropPending gives up on every buffered window. Its caller holds the flushing token.
func (p *Publisher) dropPending(reason string) {
	for _, b := range p.pending {
		p.drop(b.datums, reason, nil)
	}
	p.pending = nil
}
