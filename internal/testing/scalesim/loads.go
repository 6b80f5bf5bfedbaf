package scalesim

import (
	"math"
	"time"

	"github.com/watchbot/watchbot/cloudformation"
)

// Loads are the load curves of the comparison in docs/template.md.
var Loads = []Load{
	{
		Name: "burst", Summary: "10,000 messages at once, 30 s jobs",
		Job: 30 * time.Second, Burst: 10_000, Horizon: 2 * time.Hour,
	},
	{
		Name: "steady", Summary: "5 messages/s for 2 h, 10 s jobs",
		Job: 10 * time.Second, Rate: func(int) float64 { return 5 }, Duration: 2 * time.Hour, Horizon: 3 * time.Hour,
	},
	{
		Name: "sine", Summary: "daily sine, 0 to 4 messages/s, 10 s jobs",
		Job: 10 * time.Second, Rate: dailySine(4), Duration: 24 * time.Hour, Horizon: 25 * time.Hour,
	},
	{
		Name: "trickle", Summary: "1 message/min for 4 h, 20 min jobs",
		Job: 20 * time.Minute, Rate: func(int) float64 { return 1.0 / 60 }, Duration: 4 * time.Hour, Horizon: 5 * time.Hour,
	},
	{
		Name: "sporadic", Summary: "a message every 5 to 11 min for 4 h, 2 min jobs",
		Job: 2 * time.Minute, Rate: sporadic(5, 9, 7, 11, 6, 8), Duration: 4 * time.Hour, Horizon: 5 * time.Hour,
	},
}

// sporadic sends one message, then the next after each of gaps minutes in turn, over and over.
func sporadic(gaps ...int) func(t int) float64 {
	at := map[int]bool{}
	cycle := 0
	for _, g := range gaps {
		at[cycle] = true
		cycle += g * 60
	}
	return func(t int) float64 {
		if at[t%cycle] {
			return 1
		}
		return 0
	}
}

// dailySine sends nothing at midnight and peak messages per second at noon.
func dailySine(peak float64) func(t int) float64 {
	day := (24 * time.Hour).Seconds()
	return func(t int) float64 { return peak * (1 - math.Cos(2*math.Pi*float64(t)/day)) / 2 }
}

// Policies are the scaling policies compared: the stack as it was (visible scaling, a listen
// without scale-in protection), the stack with --metrics none now (the same steps, listen
// protecting its task), and backlog scaling, the default.
var Policies = []Policy{
	{Name: "before: visible steps, unprotected", Metrics: cloudformation.MetricsNone},
	{Name: "--metrics none: visible steps, protected", Metrics: cloudformation.MetricsNone, Protection: true, ProtectionIdle: ProtectionIdle},
	{Name: "backlog tracking, protected", Metrics: cloudformation.MetricsEMF, Protection: true, ProtectionIdle: ProtectionIdle},
}

// Options are the generation options of every simulated stack: `watchbot template`'s
// defaults, 4 worker slots a task, up to 50 tasks, and the load's job duration as
// --expected-job-duration.
func Options(load Load) cloudformation.Options {
	o := cloudformation.DefaultOptions()
	o.Command = []string{"/app/worker"}
	o.Concurrency = 4
	o.MaxTasks = 50
	o.ExpectedJobDuration = load.Job
	return o
}
