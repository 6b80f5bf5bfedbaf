package alarms

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// maxEMFValues is the most values one EMF metric member may hold.
const maxEMFValues = 100

// emfMetadata is the `_aws` member of an embedded-metric-format document.
type emfMetadata struct {
	Timestamp         int64          `json:"Timestamp"` // milliseconds since the epoch
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit Unit   `json:"Unit"`
}

// emfLine is one document, with what it carries for the counters.
type emfLine struct {
	text   []byte
	values int64              // metric values in it
	sums   map[Metric]float64 // per metric, the sum of its values
}

// writeEMF writes the window as embedded-metric-format lines: counters as the window's sum in
// the first line; distributions and gauges as arrays of samples, at most 100 per line, so that
// CloudWatch's SampleCount, Sum, Minimum and Maximum equal the window's. Each line is one JSON
// object ending in a newline, written with one Write.
func (p *Publisher) writeEMF(now time.Time, window map[Metric]*aggregate) error {
	lines, err := p.emfLines(now, window)
	if err != nil { // cannot happen with the finite values Add lets in; never silent all the same
		p.failures.Add(1)
		p.dropped.Add(int64(len(window)))
		p.log.Error("metrics dropped", "reason", "encoding the EMF line failed", "metrics", len(window), "error", err)
		return err
	}
	for i, line := range lines {
		if _, err := p.cfg.Stdout.Write(line.text); err != nil {
			p.failures.Add(1)
			p.dropEMF(lines[i:], err)
			return fmt.Errorf("write metrics: %w", err)
		}
		p.published.Add(line.values)
	}
	return nil
}

// emfLines renders the window; a window with nothing recorded renders no line.
func (p *Publisher) emfLines(now time.Time, window map[Metric]*aggregate) ([]emfLine, error) {
	dimSets := make([][]string, len(p.dimSets))
	for i, dims := range p.dimSets {
		for _, d := range dims {
			dimSets[i] = append(dimSets[i], d.Name)
		}
	}
	metrics := sortedKeys(window)
	chunks := make(map[Metric]*sampleChunks)
	for _, m := range metrics {
		if def, _ := Lookup(m); def.Kind != Counter {
			chunks[m] = newSampleChunks(window[m])
		}
	}
	var lines []emfLine
	for i := 0; ; i++ {
		doc := make(map[string]any)
		directive := emfDirective{Namespace: p.cfg.Namespace, Dimensions: dimSets}
		line := emfLine{sums: make(map[Metric]float64)}
		for _, m := range metrics {
			def, _ := Lookup(m)
			var v any
			if s := chunks[m]; s != nil {
				chunk := s.next(maxEMFValues)
				if len(chunk) == 0 {
					continue
				}
				v = chunk
				line.values += int64(len(chunk))
				for _, x := range chunk {
					line.sums[m] += x
				}
			} else {
				if i > 0 {
					continue
				}
				v = window[m].sum
				line.values++
				line.sums[m] = window[m].sum
			}
			doc[string(m)] = v
			directive.Metrics = append(directive.Metrics, emfMetric{Name: string(m), Unit: def.Unit})
		}
		if len(directive.Metrics) == 0 {
			return lines, nil
		}
		for _, d := range p.cfg.Dimensions {
			doc[d.Name] = d.Value
		}
		doc["_aws"] = emfMetadata{Timestamp: now.UnixMilli(), CloudWatchMetrics: []emfDirective{directive}}
		text, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("encode metrics: %w", err)
		}
		line.text = append(text, '\n')
		lines = append(lines, line)
	}
}

// dropEMF counts and logs the lines that could not be written.
func (p *Publisher) dropEMF(lines []emfLine, err error) {
	sums := make(map[Metric]float64)
	var values int64
	for _, l := range lines {
		values += l.values
		for m, s := range l.sums {
			sums[m] += s
		}
	}
	p.dropped.Add(values)
	var lost []any
	for _, m := range sortedKeys(sums) {
		lost = append(lost, slog.Float64(string(m), sums[m]))
	}
	p.log.Error("metrics dropped", "reason", "writing the EMF line failed", "values", values,
		slog.Group("lost_sums", lost...), "error", err)
}
