package awsenv

import (
	"net"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Where a queue's requests go is decided per queue, so that one command serves queues on
// several endpoints or in several regions (docs/queues.md#endpoints):
//
//   - an endpoint given (--endpoint-url, else AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL) takes
//     every queue's requests, whatever the URLs' hosts: a proxy, or an emulator whose URLs
//     name another host;
//   - else a URL on AWS's SQS host (sqs.REGION.amazonaws.com, or a legacy form) goes to that
//     region's endpoint;
//   - else the URL's own host is its endpoint, as the AWS SDKs for JavaScript (v3) and Ruby
//     send there too: an emulator's queue, on a loopback name (127.0.0.1:PORT, localhost,
//     sqs.REGION.localhost, reached on 127.0.0.1) or a container's (http://localstack:4566),
//     or an interface VPC endpoint's (vpce-ID.sqs.REGION.vpce.amazonaws.com), which a VPC
//     without the endpoint's private DNS reaches SQS through. The SDK alone would send them
//     to the region's public endpoint.
//
// Requests are signed for the region an AWS URL names (QueueRegion), where the queue lives,
// whatever region the configuration names; for another host, the configuration's.

// SQSEndpoint returns where SQS requests for o.QueueURL go: o.Endpoint when set; "" (the SDK's
// resolution) when getenv names an endpoint (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL) or the
// URL's host is AWS's; else the URL's own scheme, host and port, with fromURL true so that the
// caller can say so, a loopback name such as localhost or sqs.us-east-1.localhost becoming
// 127.0.0.1.
func SQSEndpoint(o Options, getenv func(string) string) (endpoint string, fromURL bool) {
	if o.Endpoint != "" || getenv("AWS_ENDPOINT_URL_SQS") != "" || getenv("AWS_ENDPOINT_URL") != "" || o.QueueURL == "" {
		return o.Endpoint, false
	}
	u, err := url.Parse(o.QueueURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false // the URL's own check reports it
	}
	if name, ok := awsHost(u); ok && !strings.HasSuffix(name, ".vpce") {
		return "", false
	}
	if endpoint, ok := loopback(u); ok {
		return endpoint, true
	}
	return u.Scheme + "://" + u.Host, true
}

// QueueRegion returns the region of a queue URL on AWS's SQS host: sqs.REGION.amazonaws.com
// (or .amazonaws.com.cn, the dual-stack sqs.REGION.api.aws, sqs-fips.REGION…), or the legacy
// REGION.queue.amazonaws.com and queue.amazonaws.com (us-east-1), or an interface VPC
// endpoint's vpce-ID.sqs.REGION.vpce.amazonaws.com; "" for any other host.
func QueueRegion(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	name, ok := awsHost(u)
	labels := strings.Split(name, ".")
	switch {
	case !ok:
	case len(labels) == 2 && (labels[0] == "sqs" || labels[0] == "sqs-fips"):
		return labels[1]
	case len(labels) == 2 && labels[1] == "queue":
		return labels[0]
	case name == "queue":
		return "us-east-1"
	case len(labels) == 4 && labels[1] == "sqs" && labels[3] == "vpce":
		return labels[2]
	}
	return ""
}

// awsHost returns u's host name without AWS's domain, when it is in one.
func awsHost(u *url.URL) (name string, ok bool) {
	host := strings.ToLower(u.Hostname())
	for _, domain := range []string{".amazonaws.com", ".amazonaws.com.cn", ".api.aws"} {
		if name, ok := strings.CutSuffix(host, domain); ok {
			return name, true
		}
	}
	return "", false
}

// loopback returns u's scheme, host and port when its host is a loopback address, a name such
// as localhost or sqs.us-east-1.localhost becoming 127.0.0.1.
func loopback(u *url.URL) (endpoint string, ok bool) {
	host := strings.ToLower(u.Hostname())
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsLoopback():
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		ip = net.IPv4(127, 0, 0, 1)
	default:
		return "", false
	}
	hostPort := ip.String()
	if ip.To4() == nil {
		hostPort = "[" + hostPort + "]"
	}
	if p := u.Port(); p != "" {
		hostPort += ":" + p
	}
	return u.Scheme + "://" + hostPort, true
}

// QueueSQS returns the SQS client of the queue at o.QueueURL: its requests go where
// SQSEndpoint decides, signed for the region the URL names (QueueRegion), else cfg's. ownEndpoint
// is the endpoint when it is the URL's own host, for the caller to say so; else "".
func QueueSQS(cfg aws.Config, o Options, getenv func(string) string) (client *sqs.Client, ownEndpoint string) {
	endpoint, fromURL := SQSEndpoint(o, getenv)
	if r := QueueRegion(o.QueueURL); r != "" {
		cfg.Region = r
	}
	if fromURL {
		ownEndpoint = endpoint
	}
	o.Endpoint = endpoint
	return SQS(cfg, o), ownEndpoint
}

// SQS returns an SQS client for cfg, sending to o.Endpoint when it is set.
func SQS(cfg aws.Config, o Options) *sqs.Client {
	return sqs.NewFromConfig(cfg, func(so *sqs.Options) {
		so.Retryer = SQSRetryer()
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
}
