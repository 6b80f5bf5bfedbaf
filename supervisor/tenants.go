package supervisor

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/watchbot/watchbot/alarms"
)

// TopTenants is how many tenants per queue Tenants keeps figures for; the rest are summed
// into OtherTenant.
const TopTenants = 20

// OtherTenant is the row that sums the tenants outside the top TopTenants.
const OtherTenant = alarms.OtherTenant

// Tenants counts, per queue, the runs of each tenant's messages (their MessageGroupId: a fair
// queue's tenant on a standard queue, a group on a FIFO one) and how long they waited in the
// queue, for /metrics and `watchbot status`. Its memory is bounded whatever the number of
// tenants: it keeps the TopTenants heaviest by runs with a space-saving sketch (Metwally,
// Agrawal and El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data
// Streams"). A tenant not in the table takes the place of the one ranked lowest and inherits
// its rank, so a tenant with more than 1/TopTenants of the runs is always in the table. The
// figures themselves are exact: a tenant's count from the moment it entered the table, what
// the tenant it displaced had counted moving to OtherTenant, so the rows always sum to every
// run counted. The runner writes it as runs start; readers on other goroutines call Rows.
// Build it with NewTenants and pass it in Deps; a nil *Tenants counts nothing.
type Tenants struct {
	mu     sync.Mutex
	queues map[string]*tenantTable
}

// tenantTable is one queue's top tenants and the sum of the others.
type tenantTable struct {
	top   map[string]*tenantCount
	other TenantFigures
}

// tenantCount is a tenant's figures and its rank in the sketch: its runs plus the rank it
// inherited when it entered the table (an over-estimate of its runs since the start).
type tenantCount struct {
	rank int64
	TenantFigures
}

// TenantFigures are the runs of one tenant's messages and their waits in the queue.
type TenantFigures struct {
	Runs int64
	// Wait is the sum of the runs' waits (start − SentTimestamp); MaxWait the longest.
	Wait, MaxWait time.Duration
}

// TenantRow is one tenant's figures on one queue (queue by name).
type TenantRow struct {
	Queue, Tenant string
	TenantFigures
}

// NewTenants returns an empty Tenants.
func NewTenants() *Tenants { return &Tenants{queues: map[string]*tenantTable{}} }

// Record counts a run of tenant's message on queue that waited wait in the queue. Messages
// without a tenant are not counted.
func (t *Tenants) Record(queue, tenant string, wait time.Duration) {
	if t == nil || tenant == "" {
		return
	}
	wait = max(wait, 0)
	t.mu.Lock()
	defer t.mu.Unlock()
	tbl := t.queues[queue]
	if tbl == nil {
		tbl = &tenantTable{top: map[string]*tenantCount{}}
		t.queues[queue] = tbl
	}
	c := tbl.top[tenant]
	if c == nil {
		c = &tenantCount{}
		if len(tbl.top) >= TopTenants {
			low := tbl.lowest()
			c.rank = tbl.top[low].rank
			tbl.other.add(tbl.top[low].TenantFigures)
			delete(tbl.top, low)
		}
		tbl.top[tenant] = c
	}
	c.rank++
	c.add(TenantFigures{Runs: 1, Wait: wait, MaxWait: wait})
}

// lowest returns the tenant ranked lowest (ties broken by name, so the choice is stable).
func (tbl *tenantTable) lowest() string {
	var low string
	for name, c := range tbl.top {
		if l := tbl.top[low]; low == "" || c.rank < l.rank || c.rank == l.rank && name < low {
			low = name
		}
	}
	return low
}

// add adds o's figures to f's.
func (f *TenantFigures) add(o TenantFigures) {
	f.Runs += o.Runs
	f.Wait += o.Wait
	f.MaxWait = max(f.MaxWait, o.MaxWait)
}

// Rows returns the figures: per queue (by name), the top tenants by runs (then by name), and
// OtherTenant last when any tenant was displaced.
func (t *Tenants) Rows() []TenantRow {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var rows []TenantRow
	for _, q := range slices.Sorted(maps.Keys(t.queues)) {
		tbl := t.queues[q]
		first := len(rows)
		for name, c := range tbl.top {
			rows = append(rows, TenantRow{Queue: q, Tenant: name, TenantFigures: c.TenantFigures})
		}
		slices.SortFunc(rows[first:], func(a, b TenantRow) int {
			return cmp.Or(cmp.Compare(b.Runs, a.Runs), cmp.Compare(a.Tenant, b.Tenant))
		})
		if tbl.other.Runs > 0 {
			rows = append(rows, TenantRow{Queue: q, Tenant: OtherTenant, TenantFigures: tbl.other})
		}
	}
	return rows
}
