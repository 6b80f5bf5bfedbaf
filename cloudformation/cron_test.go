package cloudformation

import (
	"strings"
	"testing"
)

func TestUnixCron(t *testing.T) {
	for _, c := range []struct{ unix, want string }{
		// The cron.yaml example of Elastic Beanstalk's "Periodic tasks".
		{"0 */12 * * *", "cron(0 0,12 * * ? *)"},
		{"0 23 * * *", "cron(0 23 * * ? *)"},
		{"* * * * *", "cron(* * * * ? *)"},
		{"*/15 9-17 * * 1-5", "cron(0/15 9-17 ? * 2-6 *)"},
		{"5/20 * * * *", "cron(5/20 * * * ? *)"},
		{"10-40/10 * * * *", "cron(10,20,30,40 * * * ? *)"},
		{"0,30 8 * * *", "cron(0,30 8 * * ? *)"},
		{"0 0 1 * *", "cron(0 0 1 * ? *)"},
		{"30 2 */2 * *", "cron(30 2 1/2 * ? *)"},
		{"0 6 1,15 jan,Jul *", "cron(0 6 1,15 1,7 ? *)"},
		{"0 6 * JAN-MAR *", "cron(0 6 * 1-3 ? *)"},
		// Day-of-week: Unix 0-7 (0 and 7 Sunday) to EventBridge 1-7 from Sunday.
		{"0 0 * * 0", "cron(0 0 ? * 1 *)"},
		{"0 0 * * 7", "cron(0 0 ? * 1 *)"},
		{"0 0 * * 0,7", "cron(0 0 ? * 1 *)"},
		{"0 0 * * 6", "cron(0 0 ? * 7 *)"},
		{"0 0 * * 5-7", "cron(0 0 ? * 1,6,7 *)"},
		{"0 0 * * 0-6", "cron(0 0 * * ? *)"},
		{"0 0 * * */2", "cron(0 0 ? * 1,3,5,7 *)"},
		{"0 0 * * sat,SUN", "cron(0 0 ? * 1,7 *)"},
		{"0 0 * * MON-FRI", "cron(0 0 ? * 2-6 *)"},
		{"0 0 * * 5#2", "cron(0 0 ? * 6#2 *)"},
		{"0 0 * * 0#1", "cron(0 0 ? * 1#1 *)"},
		{"0 0 * * 5L", "cron(0 0 ? * 6L *)"},
		{"0 0 L * *", "cron(0 0 L * ? *)"},
		{"0 0 15W * *", "cron(0 0 15W * ? *)"},
		{"@daily", "cron(0 0 * * ? *)"},
		{"@hourly", "cron(0 * * * ? *)"},
		{"@weekly", "cron(0 0 ? * 1 *)"},
		{"@monthly", "cron(0 0 1 * ? *)"},
		{"@yearly", "cron(0 0 1 1 ? *)"},
	} {
		t.Run(c.unix, func(t *testing.T) {
			got, err := UnixCron(c.unix)
			if err != nil || got != c.want {
				t.Fatalf("UnixCron(%q) = %q, %v; want %q", c.unix, got, err, c.want)
			}
			if err := CheckScheduleExpression(got); err != nil {
				t.Errorf("the conversion is refused: %v", err)
			}
		})
	}
}

func TestUnixCronRefuses(t *testing.T) {
	for _, c := range []struct{ unix, want string }{
		{"0 0 1 * 1", "both day-of-month and day-of-week are restricted"},
		{"0 0 */2 * 1-5", "both day-of-month and day-of-week are restricted"},
		{"0 0 * *", "5 fields"},
		{"0 0 * * * *", "5 fields"},
		{"60 * * * *", `minutes: "60" is not a number from 0 to 59`},
		{"0 24 * * *", "hours"},
		{"0 0 0 * *", "day-of-month"},
		{"0 0 * 13 *", "month"},
		{"0 0 * * 8", "day-of-week"},
		{"0 0 * * FUN", "day-of-week"},
		{"30-10 * * * *", "runs backwards"},
		{"*/0 * * * *", "step"},
		{"@reboot", "5 fields"},
		{"? * * * *", "minutes"},
	} {
		t.Run(c.unix, func(t *testing.T) {
			got, err := UnixCron(c.unix)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("UnixCron(%q) = %q, %v; want an error with %q", c.unix, got, err, c.want)
			}
		})
	}
}

func TestCheckScheduleExpression(t *testing.T) {
	for _, ok := range []string{
		"rate(1 minute)", "rate(5 minutes)", "rate(1 hour)", "rate(12 hours)", "rate(1 day)", "rate(7 days)",
		"cron(0 10 * * ? *)", "cron(15 12 * * ? *)", "cron(0 18 ? * MON-FRI *)", "cron(0 8 1 * ? *)",
		"cron(0/15 * * * ? *)", "cron(0/10 * ? * MON-FRI *)", "cron(0/5 8-17 ? * MON-FRI *)",
		"cron(0 9 ? * 2#1 *)", "cron(0 0 L * ? *)", "cron(0 0 LW * ? *)", "cron(0 0 ? * 6L 2030)",
	} {
		if err := CheckScheduleExpression(ok); err != nil {
			t.Errorf("CheckScheduleExpression(%q): %v", ok, err)
		}
	}
	for _, c := range []struct{ expr, want string }{
		{"rate(1 minutes)", "singular for 1"},
		{"rate(2 hour)", "singular for 1"},
		{"rate(0 minutes)", "positive whole number"},
		{"rate(5 seconds)", "minute(s), hour(s) or day(s)"},
		{"rate(1.5 hours)", "positive whole number"},
		{"cron(0 10 * * *)", "6 fields"},
		{"cron(0 10 * * * *)", "exactly one of day-of-month and day-of-week must be ?"},
		{"cron(0 10 ? * ? *)", "exactly one of day-of-month and day-of-week must be ?"},
		{"cron(0 10 * * ? 1969)", "year"},
		{"cron(0 10 ? * 0 *)", "day-of-week"},
		{"every 5 minutes", "expected rate(VALUE UNIT) or cron("},
		{"at(2030-01-01T00:00:00)", "expected rate(VALUE UNIT) or cron("},
	} {
		if err := CheckScheduleExpression(c.expr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckScheduleExpression(%q) = %v, want an error with %q", c.expr, err, c.want)
		}
	}
}
