package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/cloudformation"
)

// healthTimeout is how long `watchbot health` waits for an answer by default: /healthz answers
// at once, so a listen that takes longer is as good as stuck. The stack's health check gives
// the command more (cloudformation.HealthCheckTimeout), so the command reports its own reason.
const healthTimeout = 3 * time.Second

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "a container health check: exit 0 when listen's /healthz answers 200, else 1",
		Description: "GET http://ADDR/healthz. Exit 0 on 200, silently. Otherwise exit 1 with one line on stderr:\n" +
			"the reason listen gave (503), or why it did not answer. A listen bound to every interface\n" +
			"(:9090, 0.0.0.0:9090, [::]:9090) is asked on the loopback (127.0.0.1, [::1]).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http-addr", Value: cloudformation.DefaultHTTPAddr, EnvVars: []string{"WATCHBOT_HTTP_ADDR"},
				Usage: "listen's --http-addr: `ADDR` as HOST:PORT"},
			durationFlag("timeout", healthTimeout, "give up after this long"),
		},
		Action: func(c *cli.Context) error {
			timeout := durationOf(c, "timeout")
			if timeout <= 0 {
				return usagef("--timeout (%v) must be positive", timeout)
			}
			target, err := healthURL(c.String("http-addr"))
			if err != nil {
				return usageError{err}
			}
			return probeHealth(c.Context, target, timeout)
		},
	}
}

// healthURL returns the /healthz URL of a listen serving addr (its --http-addr). An empty or
// unspecified host means listen is bound to every interface, and is asked on the loopback of
// the same IP family.
func healthURL(addr string) (string, error) {
	host, port, err := cloudformation.SplitHTTPAddr(addr)
	if err != nil {
		return "", err
	}
	if host == "" {
		host = "127.0.0.1"
	} else if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.Is6() {
			host = "::1"
		}
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: "/healthz"}).String(), nil
}

// Bounds of what probeHealth reads and reports.
const (
	healthBodyLimit   = 64 << 10
	healthReasonLimit = 500
)

// probeHealth asks target once, within timeout. It returns nil when listen answers 200, and
// otherwise an error saying why in one line.
func probeHealth(ctx context.Context, target string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("unhealthy: %w", err)
	}
	// Straight to listen: never through a proxy named by the environment, no idle connection.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return noAnswer(ctx, target, timeout, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, healthBodyLimit))
	if err != nil {
		return noAnswer(ctx, target, timeout, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusServiceUnavailable:
		var status struct{ Status, Reason string }
		if json.Unmarshal(body, &status) == nil && status.Reason != "" {
			return fmt.Errorf("unhealthy: %s", oneLine(status.Reason))
		}
	}
	return fmt.Errorf("unhealthy: GET %s answered %s", target, resp.Status)
}

// noAnswer explains a request to target that got no complete answer.
func noAnswer(ctx context.Context, target string, timeout time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("unhealthy: GET %s: no answer within %v", target, timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("unhealthy: GET %s: %w", target, err)
}

// oneLine returns s on one line, at most healthReasonLimit bytes long.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > healthReasonLimit {
		s = strings.ToValidUTF8(s[:healthReasonLimit], "") + "…"
	}
	return s
}
