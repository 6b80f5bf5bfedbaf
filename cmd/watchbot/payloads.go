package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/reqbody"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/payload"
	"github.com/watchbot/watchbot/producer"
)

// operatorS3 returns the S3 client of an operator's command, with the operator's own
// credentials, configured as listen's is: the SDK's default chain, the region of the queue URL
// when nothing else names one, and an endpoint from AWS_ENDPOINT_URL_S3 addressed path style.
// Its requests stream their bodies: an upload is not copied into memory first. A bucket in
// another region is reached in its own (payload.RegionFollower).
func operatorS3(c *cli.Context, queueURL string) (*payload.RegionFollower, error) {
	cfg, err := awsenv.Load(c.Context, awsenv.Options{QueueURL: queueURL})
	if err != nil {
		return nil, err
	}
	cfg.HTTPClient = reqbody.Unguarded(cfg.HTTPClient)
	// An object written without a checksum (by an older SDK, an emulator) is read without
	// validation; the SDK would otherwise say so on stderr for every object.
	client := awsenv.S3(cfg, os.Getenv, func(o *s3.Options) { o.DisableLogOutputChecksumValidationSkipped = true })
	return &payload.RegionFollower{API: client}, nil
}

// sendPayloadFlags are send's flags for bodies sent through S3.
func sendPayloadFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "payload-bucket", Usage: "send bodies too large for the queue through the S3 bucket `B` (docs/payloads.md)"},
		&cli.IntFlag{Name: "payload-threshold", Usage: "send bodies over `BYTES` (body and attributes) through S3", DefaultText: "the queue's MaximumMessageSize"},
		&cli.BoolFlag{Name: "always-offload", Usage: "send every body through S3, whatever its size"},
	}
}

// sendOffload reads the offload flags: nil without --payload-bucket. The S3 client is set
// once the request is checked.
func sendOffload(c *cli.Context) (*producer.Offload, error) {
	if !c.IsSet("payload-bucket") {
		for _, name := range []string{"payload-threshold", "always-offload"} {
			if c.IsSet(name) {
				return nil, usagef("--%s needs --payload-bucket, the bucket the bodies go to", name)
			}
		}
		return nil, nil
	}
	o := &producer.Offload{Bucket: c.String("payload-bucket"), Threshold: c.Int("payload-threshold"), Always: c.Bool("always-offload")}
	if c.IsSet("payload-threshold") && o.Threshold == 0 {
		return nil, usagef("--payload-threshold (0) must be at least 1 byte: --always-offload sends every body through S3")
	}
	return o, nil
}

// sendSpool is the temporary file that holds, while send runs, the bodies too large to keep in
// memory; it is removed when send ends.
type sendSpool struct{ f *os.File }

func newSendSpool() (*sendSpool, error) {
	f, err := os.CreateTemp("", "watchbot-send-*")
	if err != nil {
		return nil, fmt.Errorf("create a temporary file for large bodies (TMPDIR): %w", err)
	}
	return &sendSpool{f}, nil
}

func (s *sendSpool) close() {
	_ = s.f.Close()
	_ = os.Remove(s.f.Name())
}

// readSendFile reads --file: a path, or - for all of stdin as one body. With offload, a body
// longer than SQS ever takes is not read into memory: a file is read from where it is, stdin
// through the spool. The returned function releases what the body holds open.
func readSendFile(c *cli.Context, name string, offload bool) (producer.Body, func(), error) {
	nothing := func() {}
	if name == "-" {
		var spool *sendSpool
		var sp producer.Spool
		if offload {
			s, err := newSendSpool()
			if err != nil {
				return producer.Body{}, nothing, err
			}
			spool, sp = s, s.f
		}
		release := func() {
			if spool != nil {
				spool.close()
			}
		}
		b, err := readStdin(c, func(r io.Reader) (producer.Body, error) { return producer.ReadWhole(r, "stdin", sp) })
		if errors.Is(err, producer.ErrTooLarge) {
			release()
			return b, nothing, usagef("--file -: %v: send it through S3 with --payload-bucket", err)
		}
		if err := stdinError(err, "the body"); err != nil {
			release()
			return b, nothing, err
		}
		b.Source = "--file -"
		return b, release, nil
	}
	source := "--file " + name
	f, err := os.Open(name)
	if err != nil {
		return producer.Body{}, nothing, usagef("--file: %v", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return producer.Body{}, nothing, usagef("--file: %v", err)
	}
	if st.Size() > sqsspec.MaxMessageSize {
		if !offload {
			f.Close()
			return producer.Body{}, nothing, usagef("%s is %d bytes, more than 1 MiB, the most SQS takes: send it through S3 with --payload-bucket", source, st.Size())
		}
		return producer.Body{Source: source, Large: io.NewSectionReader(f, 0, st.Size())}, func() { f.Close() }, nil
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return producer.Body{}, nothing, usagef("--file: %v", err)
	}
	return producer.Body{Text: string(data), Source: source}, nothing, nil
}

// resolvePayloadsFlag is the operator tools' flag that fetches the bodies pointers name.
func resolvePayloadsFlag() cli.Flag {
	return &cli.BoolFlag{Name: "resolve-payloads", Usage: "fetch bodies kept in S3 with your credentials, in place of their pointers"}
}

// resolvePayloads returns the S3 client that fetches pointer messages' bodies when
// --resolve-payloads is given, and nil otherwise. It fetches from whichever bucket a pointer
// names, with the operator's credentials: listen's bucket allowlist guards the task's role,
// which a message must not make read what it points at; an operator chooses to.
func resolvePayloads(c *cli.Context, queueURL string) (payload.Getter, error) {
	if !c.Bool("resolve-payloads") {
		return nil, nil
	}
	return operatorS3(c, queueURL)
}

// prefixed writes each line as a watchbot error line.
type prefixed struct{ w io.Writer }

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, "watchbot: "); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

// sampleDLQFlag is status's flag that counts the pointer messages in the dead-letter queue.
func sampleDLQFlag() cli.Flag {
	return &cli.IntFlag{Name: "sample-dlq", Usage: "peek at up to `N` DLQ messages to count those whose body is in S3", DefaultText: "none"}
}

// sampleDLQ adds to s the count of pointer messages among up to --sample-dlq messages of its
// dead-letter queue.
func sampleDLQ(c *cli.Context, api deadletter.API, s *deadletter.QueueStatus) error {
	if !c.IsSet("sample-dlq") {
		return nil
	}
	n := c.Int("sample-dlq")
	if err := deadletter.CheckPeekLimit(n); err != nil {
		return usageError{withFlags(err, map[setting.Name]string{setting.Limit: "--sample-dlq"})}
	}
	if s.Redrive == nil {
		return usagef("--sample-dlq: %s has no redrive policy, so no dead-letter queue to sample", s.Name)
	}
	sample, err := deadletter.SamplePayloads(c.Context, api, s.Redrive.DLQURL, n)
	if err != nil {
		return fmt.Errorf("sample the dead-letter queue: %w", err)
	}
	s.DLQSample = &sample
	return nil
}
