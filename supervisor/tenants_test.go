package supervisor

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTenants(t *testing.T) {
	t.Parallel()
	type rec struct {
		queue, tenant string
		wait          time.Duration
	}
	tests := []struct {
		name string
		recs []rec
		want []TenantRow
	}{
		{"none", nil, nil},
		{"no tenant is not counted", []rec{{"q", "", time.Second}}, nil},
		{"sums and max per tenant, negative wait as 0", []rec{{"q", "a", time.Second}, {"q", "a", 3 * time.Second}, {"q", "b", -time.Second}},
			[]TenantRow{
				{Queue: "q", Tenant: "a", TenantFigures: TenantFigures{Runs: 2, Wait: 4 * time.Second, MaxWait: 3 * time.Second}},
				{Queue: "q", Tenant: "b", TenantFigures: TenantFigures{Runs: 1}},
			}},
		{"queues apart, by name", []rec{{"z", "a", 0}, {"q", "a", time.Second}},
			[]TenantRow{
				{Queue: "q", Tenant: "a", TenantFigures: TenantFigures{Runs: 1, Wait: time.Second, MaxWait: time.Second}},
				{Queue: "z", Tenant: "a", TenantFigures: TenantFigures{Runs: 1}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := NewTenants()
			for _, r := range tt.recs {
				tn.Record(r.queue, r.tenant, r.wait)
			}
			if diff := cmp.Diff(tt.want, tn.Rows()); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
	var none *Tenants
	none.Record("q", "a", time.Second) // a nil Tenants counts nothing
	if none.Rows() != nil {
		t.Error("a nil Tenants has rows")
	}
}

// TestTenantsBounded: whatever the number of tenants, a queue keeps TopTenants rows and
// other; the rows sum to every run; a tenant with more than 1/TopTenants of the runs stays.
func TestTenantsBounded(t *testing.T) {
	t.Parallel()
	tn := NewTenants()
	total := 0
	for i := range 10000 {
		tn.Record("q", fmt.Sprintf("t%d", i), time.Second) // a long tail, each once
		total++
		if i%4 == 0 {
			tn.Record("q", "heavy", 2*time.Second) // a quarter of the runs
			total++
		}
		if i%50 == 0 {
			tn.Record("q", "steady", time.Second)
			total++
		}
	}
	rows := tn.Rows()
	if len(rows) != TopTenants+1 || rows[len(rows)-1].Tenant != OtherTenant {
		t.Fatalf("%d rows, last %+v; want %d tenants and other", len(rows), rows[len(rows)-1], TopTenants)
	}
	var runs int64
	var wait time.Duration
	for _, r := range rows {
		runs += r.Runs
		wait += r.Wait
	}
	if runs != int64(total) || wait != time.Duration(total+2500)*time.Second {
		t.Errorf("rows sum to %d runs and %v, want %d and %v", runs, wait, total, time.Duration(total+2500)*time.Second)
	}
	if rows[0].Tenant != "heavy" || rows[0].Runs != 2500 || rows[0].MaxWait != 2*time.Second {
		t.Errorf("first row %+v, want heavy with its 2500 runs", rows[0])
	}
	if tbl := tn.queues["q"]; len(tbl.top) != TopTenants {
		t.Errorf("the table holds %d tenants, want %d", len(tbl.top), TopTenants)
	}
}
