package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/tracing"
)

// HTTPWorker configures an HTTP worker (--http-worker): each message is POSTed to URL, as
// Elastic Beanstalk's worker daemon (sqsd) does, instead of running a command.
type HTTPWorker struct {
	// URL receives the POSTs (--http-worker).
	URL string
	// ContentType is the requests' Content-Type (--http-content-type).
	ContentType string
	// Timeout bounds one request, answer included (--http-timeout: sqsd's inactivity timeout).
	Timeout time.Duration
	// ConnectTimeout bounds a connection's set-up (--http-connect-timeout).
	ConnectTimeout time.Duration
	// HealthPath, when set, is GET before receiving until it answers 2xx; otherwise the
	// startup waits until URL's host accepts connections (--http-health-path).
	HealthPath string
	// StartupTimeout bounds that wait (--http-startup-timeout).
	StartupTimeout time.Duration
}

// DefaultHTTPWorker returns sqsd's defaults: JSON, a 180 s inactivity timeout; and a 5 s
// connect timeout and a minute for the application to come up.
func DefaultHTTPWorker() HTTPWorker {
	return HTTPWorker{ContentType: "application/json", Timeout: 180 * time.Second, ConnectTimeout: 5 * time.Second, StartupTimeout: time.Minute}
}

// Check validates an HTTP worker's settings.
func (h HTTPWorker) Check() error {
	u, err := url.Parse(h.URL)
	switch {
	case err != nil:
		return setting.Refuse(listenspec.SettingHTTPWorker, h.URL, "is not a URL: "+err.Error())
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return setting.Refuse(listenspec.SettingHTTPWorker, h.URL, "must be an http:// or https:// URL with a host")
	case strings.TrimSpace(h.ContentType) == "":
		return setting.Refuse(listenspec.SettingHTTPContentType, nil, "must not be empty")
	case h.Timeout <= 0:
		// Its upper bound, SQS's in-flight limit unless a dedupe table relays the message, is
		// the listen's rule (listenspec.WithinFlight).
		return setting.Refuse(listenspec.SettingHTTPTimeout, h.Timeout, "must be positive")
	case h.ConnectTimeout <= 0 || h.ConnectTimeout > time.Minute:
		return setting.Refuse(listenspec.SettingHTTPConnect, h.ConnectTimeout, "must be positive and at most 1m")
	case h.StartupTimeout <= 0 || h.StartupTimeout > time.Hour:
		return setting.Refuse(listenspec.SettingHTTPStartup, h.StartupTimeout, "must be positive and at most 1h")
	case h.HealthPath != "" && !strings.HasPrefix(h.HealthPath, "/"):
		return setting.Refuse(listenspec.SettingHTTPHealthPath, h.HealthPath, "must start with /")
	}
	return nil
}

// HTTP is the HTTP kind: it POSTs each job to the application.
type HTTP struct {
	cfg    HTTPWorker
	base   *url.URL
	client *http.Client
	// maxDuration stops a run that lasts longer (--max-job-duration; 0: never).
	maxDuration time.Duration
	// dirs hold the bodies of runs with fetched payloads (nil without --payload-bucket).
	dirs *Dirs
	log  *slog.Logger
}

var _ Kind = (*HTTP)(nil)

// NewHTTP returns the HTTP kind of cfg, which Check has accepted, for concurrency runs at
// once; runs longer than maxDuration (0: no limit) are stopped. dirs hold the bodies of runs
// with fetched payloads (nil without them); log tells of the wait for the application.
func NewHTTP(cfg HTTPWorker, concurrency int, maxDuration time.Duration, dirs *Dirs, log *slog.Logger) *HTTP {
	base, _ := url.Parse(cfg.URL) // checked by Check
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxConnsPerHost:     concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: cfg.ConnectTimeout,
	}
	return &HTTP{cfg: cfg, base: base, maxDuration: maxDuration, dirs: dirs, log: log, client: &http.Client{
		Transport: transport,
		// A redirect is the application's answer, not an instruction to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Start waits for the application to accept requests.
func (w *HTTP) Start(ctx context.Context) error { return w.waitReady(ctx, w.log) }

// Stop closes the idle connections to the application.
func (w *HTTP) Stop() { w.client.CloseIdleConnections() }

// Ready is always true once started: a run that cannot reach the application fails alone.
func (w *HTTP) Ready() (bool, string) { return true, "" }

// waitReady waits, until StartupTimeout, for the application: HealthPath answering 2xx, or
// its host accepting connections.
func (w *HTTP) waitReady(ctx context.Context, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StartupTimeout)
	defer cancel()
	var last error
	for logged := false; ; {
		last = w.ready(ctx)
		if last == nil {
			return nil
		}
		if !logged {
			log.Info("waiting for the HTTP worker to accept requests", "url", w.cfg.URL, "health_path", w.cfg.HealthPath, "error", last.Error())
			logged = true
		}
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), context.Canceled) {
				return ctx.Err()
			}
			return setting.Refuse(listenspec.SettingHTTPWorker, w.cfg.URL, fmt.Sprintf("did not accept requests within %s (%v): %v",
				setting.Ref(listenspec.SettingHTTPStartup), w.cfg.StartupTimeout, last))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (w *HTTP) ready(ctx context.Context) error {
	if w.cfg.HealthPath == "" {
		host := w.base.Host
		if w.base.Port() == "" {
			host = net.JoinHostPort(w.base.Hostname(), map[string]string{"http": "80", "https": "443"}[w.base.Scheme])
		}
		d := net.Dialer{Timeout: w.cfg.ConnectTimeout}
		conn, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	u := *w.base
	u.Path, u.RawQuery = w.cfg.HealthPath, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s answered %s", w.cfg.HealthPath, resp.Status)
	}
	return nil
}

// maxHTTPAnswer bounds how much of an answer is read for directives.
const maxHTTPAnswer = maxBatchResults

// Run POSTs job (one message, or a batch as a JSON array) and turns the answer into a
// result, as a worker process's exit code and result file would be.
func (w *HTTP) Run(ctx context.Context, job Job) Result {
	if w.maxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, w.maxDuration, ErrTimedOut)
		defer cancel()
	}
	var res Result
	body, err := w.body(job)
	if err != nil {
		res = Result{End: NotStarted, Err: err}
	} else {
		res = w.post(ctx, job, body)
		if body != nil {
			body.remove()
		}
	}
	logEnd(job.Log, res, w.maxDuration)
	return res
}

// body is the file the POST streams its body from, when the run has a fetched payload: the
// payload, or the batch written with it; nil otherwise, when the body is in memory.
func (w *HTTP) body(job Job) (*jobFiles, error) {
	switch {
	case !hasPayload(job.Messages):
		return nil, nil
	case job.Batch:
		files, err := w.dirs.batchFile(job.Messages, true)
		if err != nil {
			return nil, fmt.Errorf("write the request body: %w", err)
		}
		return files, nil
	}
	return job.Messages[0].Payload.take(), nil
}

// post sends the job's request, its body streamed from the file from when set, and reads
// the answer.
func (w *HTTP) post(ctx context.Context, job Job, from *jobFiles) Result {
	start := time.Now()
	rctx, cancel := context.WithTimeoutCause(ctx, w.cfg.Timeout, errHTTPTimeout)
	defer cancel()
	req, err := w.request(rctx, job, from)
	if err != nil {
		return Result{End: NotStarted, Err: err, Duration: time.Since(start)}
	}
	resp, err := w.client.Do(req)
	if err != nil {
		res := Result{Err: err, Duration: time.Since(start)}
		switch cause := context.Cause(rctx); {
		case errors.Is(cause, errHTTPTimeout):
			res.End, res.Err = TimedOut, fmt.Errorf("no answer within --http-timeout (%v)", w.cfg.Timeout)
		case ctx.Err() != nil:
			res.End, res.Err = stoppedBy(context.Cause(ctx)), context.Cause(ctx)
		default:
			res.End = NotStarted // not delivered: refused, reset, unreachable
		}
		return res
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPAnswer))
	res := Result{End: Succeeded, Duration: time.Since(start)}
	if err != nil {
		res.End, res.Err = Failed, fmt.Errorf("reading the answer: %w", err)
		if errors.Is(context.Cause(rctx), errHTTPTimeout) {
			res.End = TimedOut
		}
		return res
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	}
	res.Directives = w.directives(job, resp, answer)
	switch code := resp.StatusCode; {
	case code/100 == 2:
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		// "Slow down": a pause of Retry-After for every message (docs/limits.md); a message
		// the answer decided nothing for waits in place until it ends.
		if delay, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok && delay > 0 {
			res.Directives = slowDown(res.Directives, job.Messages, delay, code)
			break
		}
		fallthrough
	default:
		res.End, res.Code = Failed, code
	}
	return res
}

// request builds the job's POST: its body (the message as received, or the batch), and its
// headers, sqsd's for one message.
func (w *HTTP) request(ctx context.Context, job Job, from *jobFiles) (*http.Request, error) {
	target := *w.base
	var body []byte
	header := http.Header{}
	header.Set("Content-Type", w.cfg.ContentType)
	header.Set("User-Agent", "watchbot")
	switch {
	case from != nil && job.Batch:
		header.Set("X-Watchbot-Batch-Size", strconv.Itoa(len(job.Messages)))
	case job.Batch:
		var lines []json.RawMessage
		for _, l := range bytes.Split(bytes.TrimSpace(encodeBatch(job.Messages)), []byte("\n")) {
			lines = append(lines, l)
		}
		body, _ = json.Marshal(lines) // raw JSON objects always encode
		header.Set("X-Watchbot-Batch-Size", strconv.Itoa(len(job.Messages)))
	default:
		m := job.Messages[0]
		body = []byte(m.Raw)
		if p := m.Payload; from != nil && p != nil {
			header.Set("X-Watchbot-Payload-S3-Uri", p.URI)
		}
		w.sqsdHeaders(header, queueattr.NameFromURL(job.QueueURL), m)
		header.Set("X-Watchbot-Attempt", strconv.Itoa(m.Attempt))
		if p := stringAttributes(m)[listenspec.AttrTaskPath]; p != "" {
			if ref, err := url.Parse(p); err == nil && strings.HasPrefix(p, "/") {
				target = *w.base.ResolveReference(ref)
			}
		}
	}
	var reader io.Reader = bytes.NewReader(body)
	if from != nil {
		reader = io.NewSectionReader(from.stdin, 0, from.size)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), reader)
	if err != nil {
		return nil, err
	}
	if from != nil {
		req.ContentLength = from.size
		req.GetBody = func() (io.ReadCloser, error) {
			return io.NopCloser(io.NewSectionReader(from.stdin, 0, from.size)), nil
		}
	}
	tracing.InjectHeaders(ctx, header)
	req.Header = header
	return req, nil
}

// slowDown gives every message of a "slow down" answer a pause of delay: added to the
// directive the answer gave it, or alone, so that it waits in place until the pause ends.
func slowDown(directives map[string]*Directive, msgs []Message, delay time.Duration, code int) map[string]*Directive {
	for _, m := range msgs {
		switch d := directives[m.ID]; {
		case d == nil:
			if directives == nil {
				directives = map[string]*Directive{}
			}
			directives[m.ID] = &Directive{Pause: delay.String(), PauseFor: delay, Reason: "HTTP " + strconv.Itoa(code) + " with Retry-After"}
		case d.PauseFor == 0:
			d.Pause, d.PauseFor = delay.String(), delay
		}
	}
	return directives
}

// errHTTPTimeout ends a request that outlived --http-timeout.
var errHTTPTimeout = errors.New("the HTTP worker did not answer within --http-timeout")

// sqsdHeaders sets Elastic Beanstalk's worker daemon headers ("Elastic Beanstalk worker
// environments", Amazon Elastic Beanstalk Developer Guide): the message id, receive count,
// queue, first-received and sent times, sender, one per message attribute, and a scheduled
// task's name, time and path; and the message group id.
func (w *HTTP) sqsdHeaders(h http.Header, queue string, m Message) {
	h.Set("X-Aws-Sqsd-Msgid", m.ID)
	h.Set("X-Aws-Sqsd-Receive-Count", strconv.Itoa(m.Receives))
	h.Set("X-Aws-Sqsd-Queue", queue)
	if !m.FirstReceive.IsZero() {
		h.Set("X-Aws-Sqsd-First-Received-At", m.FirstReceive.UTC().Format(time.RFC3339))
	}
	if !m.SentAt.IsZero() {
		h.Set("X-Aws-Sqsd-Sent-At", m.SentAt.UTC().Format(time.RFC3339))
	}
	if id := m.SenderID; id != "" {
		h.Set("X-Aws-Sqsd-Sender-Id", id)
	}
	if g := m.GroupID; g != "" {
		// Not one of sqsd's own: the MessageGroupId (a FIFO group, or a fair queue's tenant),
		// named in its style as WATCHBOT_GROUP_ID is in the environment.
		h.Set("X-Aws-Sqsd-Group-Id", g)
	}
	for name, v := range stringAttributes(m) {
		switch name {
		case listenspec.AttrTaskName:
			h.Set("X-Aws-Sqsd-Taskname", v)
		case listenspec.AttrScheduledAt:
			h.Set("X-Aws-Sqsd-Scheduled-At", v)
		case listenspec.AttrTaskPath:
			h.Set("X-Aws-Sqsd-Path", v)
		default:
			h.Set("X-Aws-Sqsd-Attr-"+name, v)
		}
	}
}

// stringAttributes are the message's own String and Number attributes, as SQS delivered
// them. The body is POSTed as received (an SNS envelope stays one), so its headers are the SQS
// message's too, not those of an unwrapped notification.
func stringAttributes(m Message) map[string]string {
	out := make(map[string]string, len(m.SQSAttributes))
	for name, v := range m.SQSAttributes {
		if v.StringValue != nil {
			out[name] = *v.StringValue
		}
	}
	return out
}

// directives reads the answer's directives: the X-Watchbot-Result header or a JSON object
// body with an "action" for one message; a JSON array (or JSON lines) of {"id","action",...}
// for a batch. An answer that is not one of these is no directive: the status decides.
func (w *HTTP) directives(job Job, resp *http.Response, answer []byte) map[string]*Directive {
	if job.Batch {
		trimmed := bytes.TrimSpace(answer)
		if len(trimmed) == 0 || (trimmed[0] != '[' && trimmed[0] != '{') {
			return nil
		}
		if trimmed[0] == '[' {
			var items []json.RawMessage
			if json.Unmarshal(trimmed, &items) != nil {
				return nil
			}
			lines := make([][]byte, len(items))
			for i, item := range items {
				lines[i] = item
			}
			trimmed = bytes.Join(lines, []byte("\n"))
		}
		out, _ := parseBatchResults(bytes.NewReader(append(trimmed, '\n')), batchIDs(job.Messages))
		return out
	}
	raw := []byte(resp.Header.Get("X-Watchbot-Result"))
	if len(raw) == 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		raw = answer
	}
	var d Directive
	if len(raw) == 0 || json.Unmarshal(raw, &d) != nil || d.Action == "" && d.Pause == "" || d.validate() != nil {
		return nil
	}
	return map[string]*Directive{job.Messages[0].ID: &d}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP-date (RFC 9110, 10.2.3).
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}
