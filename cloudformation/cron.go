package cloudformation

import (
	"fmt"
	"math/bits"
	"regexp"
	"strconv"
	"strings"
)

// Schedule expressions of EventBridge Scheduler ("Schedule types in EventBridge Scheduler",
// EventBridge Scheduler User Guide, https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html;
// the cron fields and wildcards as in "Cron expressions",
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html):
//
//	rate(value unit)   value a positive integer; unit minute(s), hour(s), day(s), singular for 1
//	cron(minutes hours day-of-month month day-of-week year)
//
// In a cron expression exactly one of day-of-month and day-of-week is `?`. Day-of-week runs
// 1-7 from SUN to SAT. Elastic Beanstalk's cron.yaml holds five-field Unix cron expressions
// instead, which UnixCron converts.

// cronField is one field of a cron expression: its values and the names that stand for them
// (names[i] is min+i).
type cronField struct {
	name     string
	min, max int
	names    []string
	// noStep: EventBridge takes no increments (/) in this field.
	noStep bool
}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dayNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

	// The six fields of EventBridge's cron.
	ebMinutes = cronField{name: "minutes", min: 0, max: 59}
	ebHours   = cronField{name: "hours", min: 0, max: 23}
	ebDom     = cronField{name: "day-of-month", min: 1, max: 31}
	ebMonth   = cronField{name: "month", min: 1, max: 12, names: monthNames}
	ebDow     = cronField{name: "day-of-week", min: 1, max: 7, names: dayNames, noStep: true}
	ebYear    = cronField{name: "year", min: 1970, max: 2199}

	// Unix day-of-week: 0-7, 0 and 7 both Sunday.
	unixDow = cronField{name: "day-of-week", min: 0, max: 7, names: dayNames}
)

// value reads one value of f: a number in range, or one of its names.
func (f cronField) value(s string) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < f.min || n > f.max {
		if len(f.names) > 0 {
			return 0, fmt.Errorf("%s: %q is not %d-%d or %s-%s", f.name, s, f.min, f.max, f.names[0], f.names[len(f.names)-1])
		}
		return 0, fmt.Errorf("%s: %q is not a number from %d to %d", f.name, s, f.min, f.max)
	}
	return n, nil
}

// set reads a field made of `*`, values, ranges a-b and steps (*/n, a/n, a-b/n), separated
// by commas, into the set of values it matches (bit v for value v).
func (f cronField) set(s string) (uint64, error) {
	var out uint64
	for _, item := range strings.Split(s, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > f.max-f.min+1 {
				return 0, fmt.Errorf("%s: step %q in %q is not a number from 1 to %d", f.name, stepText, item, f.max-f.min+1)
			}
			step = n
		}
		lo, hi := f.min, f.max
		switch from, to, isRange := strings.Cut(rng, "-"); {
		case rng == "*":
		case isRange:
			var err error
			if lo, err = f.value(from); err != nil {
				return 0, err
			}
			if hi, err = f.value(to); err != nil {
				return 0, err
			}
			if hi < lo {
				return 0, fmt.Errorf("%s: range %q runs backwards", f.name, rng)
			}
		default:
			v, err := f.value(rng)
			if err != nil {
				return 0, err
			}
			lo = v
			if !hasStep {
				hi = v // a/n runs from a to the end; a alone is a
			}
		}
		for v := lo; v <= hi; v += step {
			out |= 1 << v
		}
	}
	return out, nil
}

// full is the set of every value of f.
func (f cronField) full() uint64 { return (1<<(f.max+1) - 1) &^ (1<<f.min - 1) }

// render writes a set of values of f as EventBridge reads it: `*` for every value, `a/n`
// for a progression that runs to the end of the field, else values and ranges.
func (f cronField) render(set uint64) string {
	if set == f.full() {
		return "*"
	}
	var vs []int
	for s := set; s != 0; s &= s - 1 {
		vs = append(vs, bits.TrailingZeros64(s))
	}
	if len(vs) >= 3 && !f.noStep {
		step := vs[1] - vs[0]
		progression := step >= 2 && vs[len(vs)-1]+step > f.max && vs[0]-step < f.min
		for i := 2; i < len(vs) && progression; i++ {
			progression = vs[i]-vs[i-1] == step
		}
		if progression {
			return fmt.Sprintf("%d/%d", vs[0], step)
		}
	}
	var parts []string
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, fmt.Sprintf("%d-%d", vs[i], vs[j]))
		case j > i:
			parts = append(parts, strconv.Itoa(vs[i]), strconv.Itoa(vs[j]))
		default:
			parts = append(parts, strconv.Itoa(vs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

var (
	ratePattern = regexp.MustCompile(`^rate\(([1-9][0-9]*) (minute|minutes|hour|hours|day|days)\)$`)
	// The day-of-month and day-of-week forms that are no set of values: the last day (L),
	// the weekday nearest a day (15W, LW), the last given weekday (6L), the nth (2#3).
	domSpecial = regexp.MustCompile(`^(L|LW|([1-9]|[12][0-9]|3[01])W)$`)
	dowSpecial = regexp.MustCompile(`^(?i)(L|([1-7]|SUN|MON|TUE|WED|THU|FRI|SAT)(L|#[1-5]))$`)
	// The same in Unix numbering, where Sunday is also 0.
	unixDowSpecial = regexp.MustCompile(`^(?i)(L|([0-7]|SUN|MON|TUE|WED|THU|FRI|SAT)(L|#[1-5]))$`)
)

// CheckScheduleExpression checks an EventBridge Scheduler rate() or cron() expression.
func CheckScheduleExpression(expr string) error {
	if m := ratePattern.FindStringSubmatch(expr); m != nil {
		if singular := m[1] == "1"; singular != !strings.HasSuffix(m[2], "s") {
			return fmt.Errorf("%q: the unit is singular for 1 and plural otherwise (rate(1 hour), rate(2 hours))", expr)
		}
		return nil
	}
	if strings.HasPrefix(expr, "rate(") {
		return fmt.Errorf("%q: expected rate(VALUE UNIT), VALUE a positive whole number and UNIT minute(s), hour(s) or day(s)", expr)
	}
	inner, isCron := strings.CutPrefix(expr, "cron(")
	inner, closed := strings.CutSuffix(inner, ")")
	if !isCron || !closed {
		return fmt.Errorf("%q: expected rate(VALUE UNIT) or cron(MINUTES HOURS DAY-OF-MONTH MONTH DAY-OF-WEEK YEAR)", expr)
	}
	fields := strings.Fields(inner)
	if len(fields) != 6 {
		return fmt.Errorf("%q: a cron expression has 6 fields (minutes hours day-of-month month day-of-week year), not %d", expr, len(fields))
	}
	if (fields[2] == "?") == (fields[4] == "?") {
		return fmt.Errorf("%q: exactly one of day-of-month and day-of-week must be ?", expr)
	}
	for i, f := range []cronField{ebMinutes, ebHours, ebDom, ebMonth, ebDow, ebYear} {
		s := fields[i]
		switch {
		case s == "?" && (i == 2 || i == 4):
			continue
		case i == 2 && domSpecial.MatchString(s), i == 4 && dowSpecial.MatchString(s):
			continue
		}
		if _, err := f.set(s); err != nil {
			return fmt.Errorf("%q: %w", expr, err)
		}
	}
	return nil
}

// unixMacros are the @ forms of Unix cron that stand for a schedule.
var unixMacros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// UnixCron converts a five-field Unix cron expression (minute hour day-of-month month
// day-of-week; day-of-week 0-7 with 0 and 7 Sunday, or SUN-SAT), as Elastic Beanstalk's
// cron.yaml holds, into EventBridge's cron(minutes hours day-of-month month day-of-week year).
// Values, names, lists, ranges and steps become the values they match; a restricted
// day-of-month makes day-of-week `?` and the other way round. Unix runs a job when either of
// the two matches if both are restricted: EventBridge cannot say that, and it is refused.
//
//	0 */12 * * *    cron(0 0,12 * * ? *)
//	0 23 * * *      cron(0 23 * * ? *)
//	*/15 9-17 * * 1-5  cron(0/15 9-17 ? * 2-6 *)
//	30 2 1 * *      cron(30 2 1 * ? *)
func UnixCron(expr string) (string, error) {
	if m, ok := unixMacros[strings.ToLower(strings.TrimSpace(expr))]; ok {
		expr = m
	}
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return "", fmt.Errorf("%q: a Unix cron expression has 5 fields (minute hour day-of-month month day-of-week), not %d", expr, len(fields))
	}
	out := make([]string, 6)
	out[5] = "*"
	for i, f := range []cronField{ebMinutes, ebHours, {}, ebMonth} {
		if i == 2 {
			continue
		}
		set, err := f.set(fields[i])
		if err != nil {
			return "", fmt.Errorf("%q: %w", expr, err)
		}
		out[i] = f.render(set)
	}
	dom, err := unixDom(fields[2])
	if err != nil {
		return "", fmt.Errorf("%q: %w", expr, err)
	}
	dow, err := unixDayOfWeek(fields[4])
	if err != nil {
		return "", fmt.Errorf("%q: %w", expr, err)
	}
	switch {
	case dow == "*":
		out[2], out[4] = dom, "?"
	case dom == "*":
		out[2], out[4] = "?", dow
	default:
		return "", fmt.Errorf("%q: both day-of-month and day-of-week are restricted, which Unix cron reads as either one; "+
			"EventBridge allows only one of them: split it into two schedules", expr)
	}
	return "cron(" + strings.Join(out, " ") + ")", nil
}

// unixDom converts a Unix day-of-month, keeping EventBridge's L and W forms.
func unixDom(s string) (string, error) {
	if domSpecial.MatchString(strings.ToUpper(s)) {
		return strings.ToUpper(s), nil
	}
	set, err := ebDom.set(s)
	if err != nil {
		return "", err
	}
	return ebDom.render(set), nil
}

// unixDayOfWeek converts a Unix day-of-week (0-7, Sunday 0 and 7) to EventBridge's 1-7.
func unixDayOfWeek(s string) (string, error) {
	if upper := strings.ToUpper(s); unixDowSpecial.MatchString(upper) {
		day, rest := upper, ""
		if i := strings.IndexAny(upper[1:], "L#"); i >= 0 {
			day, rest = upper[:i+1], upper[i+1:]
		}
		if day == "L" {
			return "L", nil
		}
		n, err := unixDow.value(day)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(n%7+1) + rest, nil
	}
	set, err := unixDow.set(s)
	if err != nil {
		return "", err
	}
	var eb uint64
	for d := 0; d <= 7; d++ {
		if set&(1<<d) != 0 {
			eb |= 1 << (d%7 + 1)
		}
	}
	return ebDow.render(eb), nil
}
