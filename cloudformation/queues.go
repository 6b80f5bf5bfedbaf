package cloudformation

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// QueueSpec is one work queue of a stack that serves several (--queue NAME[:WEIGHT]).
type QueueSpec struct {
	// Name is the queue's short name: the queue is "<prefix>-<Name>" (".fifo" appended for
	// FIFO), its dead-letter queue "<prefix>-<Name>-dead-letter".
	Name string
	// Weight is listen's --queue-weight for the queue under the weighted policy (1..1000).
	Weight int
}

// Queue policies: listen's --queue-policy.
const (
	QueuePolicyWeighted = "weighted"
	QueuePolicyStrict   = "strict"
)

// MaxQueues is the most queues a stack serves. Its scaling alarms add up each queue's
// backlog and busy slots in metric math, and a CloudWatch alarm on metric math references at
// most 10 metrics ("Limits", Amazon CloudWatch User Guide): 4 queues' visible messages and
// busy slots, and the slots, are 9.
const MaxQueues = 4

// maxQueueWeight is listen's largest --queue-weight.
const maxQueueWeight = 1000

// ParseQueueSpec reads a --queue value: NAME or NAME:WEIGHT.
func ParseQueueSpec(s string) (QueueSpec, error) {
	name, weight, hasWeight := strings.Cut(s, ":")
	q := QueueSpec{Name: name, Weight: 1}
	if hasWeight {
		w, err := strconv.Atoi(weight)
		if err != nil {
			return q, setting.Refuse(setting.Queue, s, "must be NAME or NAME:WEIGHT, WEIGHT a whole number")
		}
		q.Weight = w
	}
	return q, nil
}

// validateQueues checks --queue and --queue-policy.
func (o Options) validateQueues() error {
	if len(o.Queues) == 0 {
		if o.QueuePolicy != "" && o.QueuePolicy != QueuePolicyWeighted && o.QueuePolicy != QueuePolicyStrict {
			return setting.Refuse("", nil, fmt.Sprintf("--queue-policy (%q) must be weighted or strict", o.QueuePolicy))
		}
		return nil
	}
	if o.QueueName != "" {
		return setting.Refuse(setting.QueueName, o.QueueName, "names the one queue of a stack: give "+setting.Ref(setting.Queue)+" for each queue instead")
	}
	if len(o.Queues) > MaxQueues {
		return setting.Refuse(setting.Queue, nil, fmt.Sprintf("is given %d times: a stack serves at most %d queues (its scaling alarms sum the queues' metrics, and an alarm takes at most 10)", len(o.Queues), MaxQueues))
	}
	if o.QueuePolicy != "" && o.QueuePolicy != QueuePolicyWeighted && o.QueuePolicy != QueuePolicyStrict {
		return setting.Refuse("", nil, fmt.Sprintf("--queue-policy (%q) must be weighted or strict", o.QueuePolicy))
	}
	if once, _ := strconv.ParseBool(o.Environment["writableFilesystem"]); once && len(o.Queues) > 1 {
		// The variable is listen's --once, which takes one message from one queue: the task
		// would be refused at every start.
		return setting.Refuse(setting.Environment, "writableFilesystem=true", "makes listen --once, which serves one queue: give one --queue, or leave it out")
	}
	names, ids := map[string]bool{}, map[string]string{}
	for _, q := range o.Queues {
		switch {
		case !namePattern.MatchString(q.Name):
			return setting.Refuse(setting.Queue, q.Name, "must be NAME or NAME:WEIGHT, NAME of letters, digits, - and _")
		case o.NamePrefix != "" && len(o.NamePrefix+"-"+q.Name) > maxQueueName-len(deadLetterPart+fifoSuffix):
			return setting.Refuse(setting.Queue, q.Name, fmt.Sprintf("makes the queue %s-%s, longer than %d characters: the dead-letter queue's name must fit SQS's 80", o.NamePrefix, q.Name, maxQueueName-len(deadLetterPart+fifoSuffix)))
		case q.Weight < 1 || q.Weight > maxQueueWeight:
			return setting.Refuse(setting.Queue, fmt.Sprintf("%s:%d", q.Name, q.Weight), fmt.Sprintf("has a weight outside 1..%d", maxQueueWeight))
		case names[q.Name]:
			return setting.Refuse(setting.Queue, q.Name, "is given twice")
		}
		names[q.Name] = true
		id := idPart(q.Name)
		if other, taken := ids[id]; taken {
			return setting.Refuse(setting.Queue, q.Name, fmt.Sprintf("and %s make the same logical ids (%s): name them apart by more than - and _", other, id))
		}
		ids[id] = q.Name
	}
	return nil
}

// idPart turns a queue's short name into a part of a logical id: letters and digits, each
// part after a - or _ capitalized ("bulk-jobs" is BulkJobs).
func idPart(name string) string {
	var b strings.Builder
	upper := true
	for _, r := range name {
		if r == '-' || r == '_' {
			upper = true
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
		}
		b.WriteRune(r)
		upper = false
	}
	return b.String()
}

// workQueue is one work queue of the stack and its dead-letter queue: their logical ids and
// names (Fn::Sub syntax).
type workQueue struct {
	id, dlqID     string
	name, dlqName string
	// suffix is added to the logical ids and output names of the queue's own resources:
	// empty for the first queue, which keeps a single-queue stack's ids, so schedules send to
	// it; idPart(short name) for the others.
	suffix string
	// short is the --queue name ("" in a single-queue stack without --queue); weight its
	// weight.
	short  string
	weight int
}

// workQueues returns the stack's work queues, in priority order: one for a single-queue
// stack, else one per --queue.
func (g *generator) workQueues() []workQueue {
	fifo := ""
	if g.o.FIFO {
		fifo = fifoSuffix
	}
	if len(g.o.Queues) == 0 {
		name, dlq := g.queueNames()
		return []workQueue{{id: ResQueue, dlqID: ResDeadLetterQueue, name: name, dlqName: dlq, weight: 1}}
	}
	var out []workQueue
	for i, q := range g.o.Queues {
		base := g.name("-" + q.Name)
		wq := workQueue{id: ResQueue, dlqID: ResDeadLetterQueue, name: base + fifo, dlqName: base + deadLetterPart + fifo, short: q.Name, weight: q.Weight}
		if i > 0 {
			wq.suffix = idPart(q.Name)
			wq.id, wq.dlqID = ResQueue+wq.suffix, ResDeadLetterQueue+wq.suffix
		}
		out = append(out, wq)
	}
	return out
}

// metricSum is a sum of one metric over the work queues, for metric math: one MetricStat per
// queue, named id (one queue) or id1, id2, … added up in an expression named id.
type metricSum struct {
	id    string
	stats []namedStat
	// expression adds up stats; empty with one queue, whose stat is named id itself.
	expression string
}

type namedStat struct {
	id   string
	stat MetricStat
}

// sumOver returns the sum over the work queues of the metric of each queue that of returns.
func sumOver(id string, qs []workQueue, of func(workQueue) MetricStat) metricSum {
	if len(qs) == 1 {
		return metricSum{id: id, stats: []namedStat{{id, of(qs[0])}}}
	}
	s := metricSum{id: id}
	var terms []string
	for i, q := range qs {
		n := id + strconv.Itoa(i+1)
		s.stats = append(s.stats, namedStat{n, of(q)})
		terms = append(terms, n)
	}
	s.expression = strings.Join(terms, " + ")
	return s
}

// alarmQueries are s's queries in an alarm's metric math.
func (s metricSum) alarmQueries() []MetricDataQuery {
	var out []MetricDataQuery
	for _, st := range s.stats {
		out = append(out, MetricDataQuery{Id: st.id, MetricStat: &st.stat})
	}
	if s.expression != "" {
		out = append(out, MetricDataQuery{Id: s.id, Expression: s.expression})
	}
	return out
}

// trackedQueries are s's queries in target tracking's metric math.
func (s metricSum) trackedQueries() []TargetTrackingMetricDataQuery {
	var out []TargetTrackingMetricDataQuery
	for _, st := range s.stats {
		out = append(out, TargetTrackingMetricDataQuery{Id: st.id, MetricStat: &TargetTrackingMetricStat{Metric: st.stat.Metric, Stat: st.stat.Stat}})
	}
	if s.expression != "" {
		out = append(out, TargetTrackingMetricDataQuery{Id: s.id, Expression: s.expression})
	}
	return out
}

// queueNames returns the work and dead-letter queue names in Fn::Sub syntax. They are fixed
// rather than generated by CloudFormation so that the dead-letter queue's redrive-allow policy
// can name the work queue's ARN without a dependency cycle.
func (g *generator) queueNames() (queue, deadLetter string) {
	suffix := ""
	if g.o.FIFO {
		suffix = fifoSuffix
	}
	base := strings.TrimSuffix(g.o.QueueName, fifoSuffix)
	if base == "" {
		base = g.name("-queue")
	}
	return base + suffix, base + deadLetterPart + suffix
}

// queues adds the work queues and their dead-letter queues.
func (g *generator) queues() {
	for _, q := range g.workQueues() {
		g.queue(q)
	}
}

// queue adds a work queue and its dead-letter queue.
func (g *generator) queue(q workQueue) {
	queueName, deadLetterName := q.name, q.dlqName
	visibility := seconds(g.o.VisibilityTimeout)
	g.add(q.dlqID, Resource{Type: "AWS::SQS::Queue", Properties: &Queue{
		QueueName:                     sub(deadLetterName),
		FifoQueue:                     g.o.FIFO,
		ContentBasedDeduplication:     g.o.FIFO,
		VisibilityTimeout:             visibility,
		MessageRetentionPeriod:        seconds(DeadLetterRetention),
		ReceiveMessageWaitTimeSeconds: 20,
		SqsManagedSseEnabled:          true,
		RedriveAllowPolicy: &RedriveAllowPolicy{
			RedrivePermission: "byQueue",
			SourceQueueArns:   []any{Sub("arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:" + queueName)},
		},
	}})
	g.add(q.id, Resource{Type: "AWS::SQS::Queue", Properties: &Queue{
		QueueName:                     sub(queueName),
		FifoQueue:                     g.o.FIFO,
		ContentBasedDeduplication:     g.o.FIFO,
		VisibilityTimeout:             visibility,
		MessageRetentionPeriod:        seconds(g.o.QueueRetention),
		ReceiveMessageWaitTimeSeconds: 20,
		SqsManagedSseEnabled:          true,
		RedrivePolicy: &RedrivePolicy{
			DeadLetterTargetArn: GetAtt(q.dlqID, "Arn"),
			MaxReceiveCount:     g.o.maxReceiveCount(),
		},
	}})
}

// maxReceiveCount is the redrive policy's: --max-attempts, or with --dedupe twice that (at
// most SQS's 1000), since listen then counts attempts in runs and the receives that run
// nothing (a held key, a stop) need room above them before the redrive policy moves a message.
// A --max-job-duration past SQS's in-flight limit adds a receive for each limit's worth of
// the job, which its relays take.
func (o Options) maxReceiveCount() int {
	if o.Dedupe {
		return min(2*o.MaxAttempts+relaysFor(o.MaxJobDuration), sqsspec.MaxReceiveCount)
	}
	return o.MaxAttempts
}

// relaysFor is how many relays a job of d needs: one for each in-flight limit it passes.
func relaysFor(d time.Duration) int {
	if d <= sqsspec.MaxInFlight {
		return 0
	}
	return int((d - 1) / sqsspec.MaxInFlight)
}

// relaysFit refuses a --max-job-duration whose relays the redrive policy cannot give even at
// SQS's largest maxReceiveCount: listen would refuse it at start.
func (o Options) relaysFit() error {
	if !o.Dedupe || o.MaxJobDuration <= sqsspec.MaxInFlight {
		return nil
	}
	if longest := time.Duration(sqsspec.MaxReceiveCount-o.MaxAttempts) * sqsspec.MaxInFlight; o.MaxJobDuration > longest {
		return setting.Refuse(listenspec.SettingMaxJobDuration, o.MaxJobDuration, fmt.Sprintf(
			"is longer than a queue allows a relayed job with %s %d: at most (%d − %d) × %v = %v",
			setting.Ref(listenspec.SettingMaxAttempts), o.MaxAttempts, sqsspec.MaxReceiveCount, o.MaxAttempts, sqsspec.MaxInFlight, longest))
	}
	return nil
}
