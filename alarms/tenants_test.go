package alarms

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadTenantFigures(t *testing.T) {
	t.Parallel()
	text := `# TYPE watchbot_tenant_runs_total counter
watchbot_tenant_runs_total{queue="b",tenant="x"} 1
watchbot_tenant_runs_total{queue="a",tenant="other"} 50
watchbot_tenant_runs_total{queue="a",tenant="acme"} 4
watchbot_tenant_runs_total{queue="a",tenant="zeta"} 12
# TYPE watchbot_tenant_wait_seconds_total counter
watchbot_tenant_wait_seconds_total{queue="a",tenant="acme"} 6
# TYPE watchbot_tenant_wait_seconds_max gauge
watchbot_tenant_wait_seconds_max{queue="a",tenant="acme"} 2.5
# TYPE watchbot_running_jobs gauge
watchbot_running_jobs{queue="a"} 3
`
	got, err := ReadTenantFigures(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []TenantFigure{
		{Queue: "a", Tenant: "zeta", Runs: 12},
		{Queue: "a", Tenant: "acme", Runs: 4, WaitSeconds: 6, MaxWaitSeconds: 2.5},
		{Queue: "a", Tenant: "other", Runs: 50},
		{Queue: "b", Tenant: "x", Runs: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
	if m := got[1].MeanWaitSeconds(); m != 1.5 {
		t.Errorf("mean wait %v, want 1.5", m)
	}
	if _, err := ReadTenantFigures(strings.NewReader("not { metrics")); err == nil {
		t.Error("malformed text read without error")
	}
}
