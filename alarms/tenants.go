package alarms

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TenantFigure is one tenant's figures on one queue, as listen's /metrics serves them
// (TenantPrometheusMetrics).
type TenantFigure struct {
	Queue  string `json:"-"`
	Tenant string `json:"tenant"`
	// Runs started of the tenant's messages; WaitSeconds their summed wait in the queue,
	// MaxWaitSeconds the longest.
	Runs           int64   `json:"runs"`
	WaitSeconds    float64 `json:"waitSeconds"`
	MaxWaitSeconds float64 `json:"maxWaitSeconds"`
}

// MeanWaitSeconds is the mean wait of the tenant's runs (0 without runs).
func (f TenantFigure) MeanWaitSeconds() float64 {
	if f.Runs == 0 {
		return 0
	}
	return f.WaitSeconds / float64(f.Runs)
}

// ReadTenantFigures reads the per-tenant series of a Prometheus text exposition (a listen's
// /metrics), ordered by queue, then runs (most first), with the "other" row last.
func ReadTenantFigures(r io.Reader) ([]TenantFigure, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	type key struct{ queue, tenant string }
	rows := map[key]*TenantFigure{}
	for _, m := range TenantPrometheusMetrics {
		f := families[m.Name]
		if f == nil {
			continue
		}
		for _, s := range f.GetMetric() {
			var k key
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "queue":
					k.queue = l.GetValue()
				case "tenant":
					k.tenant = l.GetValue()
				}
			}
			row := rows[k]
			if row == nil {
				row = &TenantFigure{Queue: k.queue, Tenant: k.tenant}
				rows[k] = row
			}
			v := s.GetCounter().GetValue() + s.GetGauge().GetValue()
			switch m.Name {
			case "watchbot_tenant_runs_total":
				row.Runs = int64(v)
			case "watchbot_tenant_wait_seconds_total":
				row.WaitSeconds = v
			case "watchbot_tenant_wait_seconds_max":
				row.MaxWaitSeconds = v
			}
		}
	}
	out := make([]TenantFigure, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b TenantFigure) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(isOther(a), isOther(b)), cmp.Compare(b.Runs, a.Runs), cmp.Compare(a.Tenant, b.Tenant))
	})
	return out, nil
}

// OtherTenant is the row that sums the tenants outside the top 20.
const OtherTenant = "other"

func isOther(f TenantFigure) int {
	if f.Tenant == OtherTenant {
		return 1
	}
	return 0
}
