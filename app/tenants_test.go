package app

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/supervisor"
)

// TestTenantCollector: each tenant row is one series of each of alarms.TenantPrometheusMetrics,
// labelled queue and tenant.
func TestTenantCollector(t *testing.T) {
	t.Parallel()
	tenants := supervisor.NewTenants()
	tenants.Record("jobs", "acme", 2*time.Second)
	tenants.Record("jobs", "acme", 4*time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(tenantCollector{tenants})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"watchbot_tenant_runs_total": 2, "watchbot_tenant_wait_seconds_total": 6, "watchbot_tenant_wait_seconds_max": 4}
	if len(families) != len(alarms.TenantPrometheusMetrics) {
		t.Fatalf("%d families, want %d", len(families), len(alarms.TenantPrometheusMetrics))
	}
	for _, f := range families {
		m := f.GetMetric()
		if len(m) != 1 {
			t.Fatalf("%s has %d series, want 1", f.GetName(), len(m))
		}
		labels := map[string]string{}
		for _, l := range m[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		got := m[0].GetCounter().GetValue() + m[0].GetGauge().GetValue()
		if got != want[f.GetName()] || labels["queue"] != "jobs" || labels["tenant"] != "acme" {
			t.Errorf("%s = %v %v, want %v for jobs/acme", f.GetName(), got, labels, want[f.GetName()])
		}
	}
}
