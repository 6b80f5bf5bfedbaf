package supervisor

import (
	"slices"
	"time"
)

// How held messages leave the scheduler: a run that finished (finish), one message the loop
// takes out (drop), and everything at a stop (drain). What leaves unrun is a handBack.

// finish records how each job of a run left it (disps[i] is run[i]'s) and returns the held
// messages that must go back to SQS because one of their group was returned.
func (s *scheduler) finish(run []*job, disps []disposition, now time.Time) (back []*job) {
	s.open--
	var touched []*group
	kept := map[*group][]*job{}
	returned := map[*group]bool{}
	for i, j := range run {
		g, d := j.grp, disps[i]
		if !slices.Contains(touched, g) {
			touched = append(touched, g)
		}
		g.inRun--
		switch {
		case d.returned:
			returned[g] = true
		case d.keep:
			if d.attempt {
				j.attempt++
			}
			j.pending = d.pending
			if len(kept[g]) == 0 {
				g.readyAt = d.at
			}
			kept[g] = append(kept[g], j)
		}
	}
	for _, g := range touched {
		if returned[g] {
			back = append(append(back, kept[g]...), g.jobs...)
			s.held -= len(g.jobs)
			g.jobs = nil
		} else if k := kept[g]; len(k) > 0 {
			g.jobs = append(k, g.jobs...)
			s.held += len(k)
		}
		if g.inRun == 0 {
			s.place(g, now)
		}
	}
	return back
}

// drop takes a held job out, with the held messages of its group behind it, because it must
// go back to SQS or is no longer watchbot's. It reports false when the job is not held (it
// is in a run). wait is what is left of the job's in-place retry, when it was waiting one.
func (s *scheduler) drop(j *job, now time.Time) (found bool, wait time.Duration, behind []*job) {
	g := j.grp
	i := -1
	if g != nil {
		i = slices.Index(g.jobs, j)
	}
	if i < 0 {
		return false, 0, nil
	}
	if i == 0 && g.state == groupWaiting {
		wait = g.readyAt.Sub(now)
	}
	behind = slices.Clone(g.jobs[i+1:])
	n := len(g.jobs) - i
	g.jobs = g.jobs[:i]
	s.held -= n
	switch g.state {
	case groupReady:
		s.readyMsgs -= n
		if len(g.jobs) == 0 {
			s.ready = slices.DeleteFunc(s.ready, func(r *group) bool { return r == g })
			g.state = groupIdle
		}
	case groupWaiting:
		if len(g.jobs) == 0 {
			s.waiting = slices.DeleteFunc(s.waiting, func(w *group) bool { return w == g })
			g.state = groupIdle
		}
	}
	if len(g.jobs) == 0 && g.inRun == 0 {
		delete(s.groups, g.key)
	}
	return true, wait, behind
}

// handBack is a held message to hand back to SQS, visible again after wait; or, lost, one
// that is no longer watchbot's and is only let go.
type handBack struct {
	j    *job
	wait time.Duration
	lost bool
}

// drain takes out every held message, to be handed back: a group's head keeps what is left
// of its in-place retry, the messages behind it go back at once.
func (s *scheduler) drain(now time.Time) []handBack {
	var out []handBack
	take := func(g *group) {
		for i, j := range g.jobs {
			var wait time.Duration
			if i == 0 && g.state == groupWaiting {
				wait = max(0, g.readyAt.Sub(now))
			}
			out = append(out, handBack{j: j, wait: wait})
		}
		s.held -= len(g.jobs)
		g.jobs = nil
		g.state = groupIdle
		if g.inRun == 0 {
			delete(s.groups, g.key)
		}
	}
	for _, g := range s.ready {
		take(g)
	}
	for _, g := range s.waiting {
		take(g)
	}
	// FIFO groups with a run under way hold their later messages too.
	for _, g := range s.groups {
		if len(g.jobs) > 0 {
			take(g)
		}
	}
	s.ready, s.waiting, s.readyMsgs = nil, nil, 0
	return out
}
