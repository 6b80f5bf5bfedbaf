package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/supervisor"
)

// tenantCollector serves the per-tenant series of alarms.TenantPrometheusMetrics from the
// supervisor's count of the top tenants, read at each scrape.
type tenantCollector struct{ tenants *supervisor.Tenants }

// tenantDescs are the series' descriptions, in the order of alarms.TenantPrometheusMetrics.
var tenantDescs = func() []*prometheus.Desc {
	var ds []*prometheus.Desc
	for _, m := range alarms.TenantPrometheusMetrics {
		ds = append(ds, prometheus.NewDesc(m.Name, m.Help, []string{"queue", "tenant"}, nil))
	}
	return ds
}()

func (c tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range tenantDescs {
		ch <- d
	}
}

func (c tenantCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.tenants.Rows() {
		values := map[string]float64{
			"watchbot_tenant_runs_total":         float64(r.Runs),
			"watchbot_tenant_wait_seconds_total": r.Wait.Seconds(),
			"watchbot_tenant_wait_seconds_max":   r.MaxWait.Seconds(),
		}
		for i, m := range alarms.TenantPrometheusMetrics {
			typ := prometheus.CounterValue
			if m.Type == "gauge" {
				typ = prometheus.GaugeValue
			}
			ch <- prometheus.MustNewConstMetric(tenantDescs[i], typ, values[m.Name], r.Queue, r.Tenant)
		}
	}
}
