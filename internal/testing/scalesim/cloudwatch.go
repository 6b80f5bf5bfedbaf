package scalesim

import "fmt"

// source is a metric the model produces.
type source int

// The metrics the template's scaling reads.
const (
	// srcVisible and srcNotVisible are the queue's ApproximateNumberOfMessagesVisible and
	// ApproximateNumberOfMessagesNotVisible (AWS/SQS), which SQS samples once a minute.
	srcVisible source = iota
	srcNotVisible
	// srcSlots and srcBusy are the WorkerSlots and BusySlots gauges each task publishes once
	// a minute.
	srcSlots
	srcBusy
)

// datapoints are the samples of one metric in one one-minute period.
type datapoints struct {
	sum, max float64
	n        int
}

func (d *datapoints) add(v float64) {
	if d.n == 0 || v > d.max {
		d.max = v
	}
	d.sum += v
	d.n++
}

// stat returns statistic s of the period, missing when the period has no sample.
func (d datapoints) stat(s string) (value, error) {
	if d.n == 0 {
		return missing, nil
	}
	switch s {
	case "Sum":
		return some(d.sum), nil
	case "Average":
		return some(d.sum / float64(d.n)), nil
	case "Maximum":
		return some(d.max), nil
	case "SampleCount":
		return some(float64(d.n)), nil
	}
	return missing, fmt.Errorf("statistic %q is not modelled", s)
}

// cloudWatch keeps the model's metrics in one-minute periods, as CloudWatch aggregates
// them: period n holds the samples timestamped in [60n, 60n+60).
type cloudWatch struct {
	periods [][4]datapoints // by period, by source
}

func (cw *cloudWatch) put(src source, at int, v float64) {
	n := at / period
	for len(cw.periods) <= n {
		cw.periods = append(cw.periods, [4]datapoints{})
	}
	cw.periods[n][src].add(v)
}

func (cw *cloudWatch) get(src source, n int, stat string) (value, error) {
	if n < 0 || n >= len(cw.periods) {
		return missing, nil
	}
	return cw.periods[n][src].stat(stat)
}

// query is one entry of a metric-math computation: a metric with its statistic, or an
// expression over the entries before it.
type query struct {
	id       string
	src      source
	stat     string
	expr     expr // nil for a metric
	returned bool
}

// series is a CloudWatch metric or metric-math computation, evaluated one period at a time.
type series []query

func (s series) at(cw *cloudWatch, n int) (value, error) {
	env := map[string]value{}
	var out value
	for _, q := range s {
		var v value
		if q.expr != nil {
			v = q.expr(env)
		} else {
			var err error
			if v, err = cw.get(q.src, n, q.stat); err != nil {
				return missing, err
			}
		}
		env[q.id] = v
		if q.returned {
			out = v
		}
	}
	return out, nil
}

// alarm is a CloudWatch metric alarm: ALARM when its last periods datapoints all breach the
// threshold. Missing datapoints count as TreatMissingData says: notBreaching, breaching, or
// missing (target tracking's alarms), where an alarm whose latest datapoint is missing
// keeps still (CloudWatch's INSUFFICIENT_DATA when all are missing; the model takes the
// simpler rule that no action follows a datapoint that is not there).
type alarm struct {
	name      string
	series    series
	periods   int
	threshold float64
	cmp       string
	onMissing string
	// onAlarm is invoked at every evaluation while the alarm is in ALARM (CloudWatch repeats
	// an Application Auto Scaling action every minute the alarm stays there), with how far
	// each of its last periods datapoints is past the threshold; a missing datapoint treated
	// as breaching is taken as the threshold itself.
	onAlarm func(now int, breach []float64)
}

// below reports whether the alarm fires below its threshold.
func (a *alarm) below() bool {
	return a.cmp == "LessThanThreshold" || a.cmp == "LessThanOrEqualToThreshold"
}

// evaluate evaluates the alarm at time now over the periods up to last, and invokes its
// action when it is in ALARM.
func (a *alarm) evaluate(cw *cloudWatch, now, last int) error {
	var values []float64
	for n := last - a.periods + 1; n <= last; n++ {
		v, err := a.series.at(cw, n)
		if err != nil {
			return fmt.Errorf("alarm %s: %w", a.name, err)
		}
		if !v.ok {
			switch a.onMissing {
			case "breaching":
				values = append(values, 0)
				continue
			case "notBreaching", "missing", "":
				return nil
			}
			return fmt.Errorf("alarm %s: TreatMissingData %q is not modelled", a.name, a.onMissing)
		}
		breach, err := breaches(a.cmp, v.v, a.threshold)
		if err != nil {
			return fmt.Errorf("alarm %s: %w", a.name, err)
		}
		if !breach {
			return nil
		}
		values = append(values, v.v-a.threshold)
	}
	a.onAlarm(now, values)
	return nil
}

func breaches(cmp string, v, threshold float64) (bool, error) {
	switch cmp {
	case "GreaterThanThreshold":
		return v > threshold, nil
	case "GreaterThanOrEqualToThreshold":
		return v >= threshold, nil
	case "LessThanThreshold":
		return v < threshold, nil
	case "LessThanOrEqualToThreshold":
		return v <= threshold, nil
	}
	return false, fmt.Errorf("comparison %q is not modelled", cmp)
}
