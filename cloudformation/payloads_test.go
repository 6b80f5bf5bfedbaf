package cloudformation

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPayloadExpirationDays(t *testing.T) {
	for _, tt := range []struct {
		retention time.Duration
		want      int
	}{
		{time.Minute, 15},        // 14 days and a minute: rounded up
		{24 * time.Hour, 15},     // whole days add up
		{36 * time.Hour, 16},     // a day and a half: rounded up
		{4 * 24 * time.Hour, 18}, // the default retention
		{DeadLetterRetention - time.Second, 28},
	} {
		if got := PayloadExpirationDays(tt.retention); got != tt.want {
			t.Errorf("PayloadExpirationDays(%v) = %d, want %d", tt.retention, got, tt.want)
		}
	}
}

func TestPayloadBucketNames(t *testing.T) {
	for _, tt := range []struct {
		name     string
		bucket   PayloadBucket
		wantErr  string // "" for valid
		existing bool
	}{
		{name: "plain", bucket: PayloadBucket{Name: "acme-payloads"}},
		{name: "pseudo parameters", bucket: PayloadBucket{Name: "p-${AWS::AccountId}-${AWS::Region}"}},
		{name: "existing with dots", bucket: PayloadBucket{Name: "acme.payloads", Existing: true}},
		{name: "none", bucket: PayloadBucket{}},
		{name: "created with dots", bucket: PayloadBucket{Name: "acme.payloads"}, wantErr: "Payload.Buckets (\"acme.payloads\") has a dot"},
		{name: "upper case", bucket: PayloadBucket{Name: "Acme"}, wantErr: "is not an S3 bucket name"},
		{name: "too short", bucket: PayloadBucket{Name: "ab"}, wantErr: "is not an S3 bucket name"},
		{name: "too long once substituted", bucket: PayloadBucket{Name: strings.Repeat("a", 36) + "-${AWS::AccountId}-${AWS::Region}"}, wantErr: "is not an S3 bucket name"},
		{name: "other variable", bucket: PayloadBucket{Name: "b-${AWS::StackName}"}, wantErr: "may contain only ${AWS::AccountId} and ${AWS::Region}, not ${AWS::StackName}"},
		{name: "two dots", bucket: PayloadBucket{Name: "a..b", Existing: true}, wantErr: "two dots in a row"},
		{name: "ip address", bucket: PayloadBucket{Name: "192.168.5.4", Existing: true}, wantErr: "looks like an IP address"},
		{name: "reserved prefix", bucket: PayloadBucket{Name: "xn--payloads"}, wantErr: "starts with xn--"},
		{name: "reserved suffix", bucket: PayloadBucket{Name: "payloads-s3alias"}, wantErr: "ends with -s3alias"},
		{name: "existing without a name", bucket: PayloadBucket{Existing: true}, wantErr: "Payload.ExistingBucket (\"\") must name a bucket"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.bucket.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestPayloadBucket checks what the stack grants and creates for payloads: the task reads and
// deletes objects of that bucket only, a producer writes them, and a created bucket is
// private, encrypted and expires its objects.
func TestPayloadBucket(t *testing.T) {
	for _, ex := range examples(t) {
		o := ex.opts()
		if !o.HasPayloadBucket() {
			tpl := generate(t, o)
			for _, id := range []string{ResPayloadBucket, ResPayloadBucketPolicy, ResPayloadProducerPolicy} {
				if _, ok := tpl.Resources[id]; ok {
					t.Errorf("%s: %s without a payload bucket", ex.name, id)
				}
			}
			continue
		}
		t.Run(ex.name, func(t *testing.T) {
			tpl := generate(t, o)
			objects := Sub("arn:${AWS::Partition}:s3:::" + o.PayloadBucket.Name + "/*")
			bucketARN := Sub("arn:${AWS::Partition}:s3:::" + o.PayloadBucket.Name)
			if !o.PayloadBucket.Existing {
				objects = Sub("arn:${AWS::Partition}:s3:::${PayloadBucket}/*")
				bucketARN = Sub("arn:${AWS::Partition}:s3:::${PayloadBucket}")
			}
			role := resource[*Role](t, tpl, ResTaskRole, "AWS::IAM::Role")
			var granted []Statement
			for _, p := range role.Policies {
				for _, s := range p.PolicyDocument.Statement {
					for _, a := range s.Action {
						if strings.HasPrefix(a, "s3:") {
							granted = append(granted, s)
							break
						}
					}
				}
			}
			want := []Statement{
				{Sid: "ReadAndDeletePayloads", Effect: "Allow", Action: []string{"s3:DeleteObject", "s3:GetObject"}, Resource: []any{objects}},
				{Sid: "TellMissingPayloads", Effect: "Allow", Action: []string{"s3:ListBucket"}, Resource: []any{bucketARN}},
			}
			if diff := cmp.Diff(want, granted); diff != "" {
				t.Errorf("task role's S3 statements (-want +got):\n%s", diff)
			}
			producer := resource[*ManagedPolicy](t, tpl, ResPayloadProducerPolicy, "AWS::IAM::ManagedPolicy")
			wantProducer := []Statement{{Sid: "WritePayloads", Effect: "Allow", Action: []string{"s3:DeleteObject", "s3:PutObject"}, Resource: []any{objects}}}
			if diff := cmp.Diff(wantProducer, producer.PolicyDocument.Statement); diff != "" {
				t.Errorf("producer policy (-want +got):\n%s", diff)
			}
			if got := tpl.Outputs["PayloadProducerPolicyArn"].Value; !cmp.Equal(got, Ref(ResPayloadProducerPolicy)) {
				t.Errorf("PayloadProducerPolicyArn output %v", got)
			}

			if o.PayloadBucket.Existing {
				for _, id := range []string{ResPayloadBucket, ResPayloadBucketPolicy} {
					if _, ok := tpl.Resources[id]; ok {
						t.Errorf("%s created for an existing bucket", id)
					}
				}
				if got := tpl.Outputs["PayloadBucketName"].Value; got != o.PayloadBucket.Name {
					t.Errorf("PayloadBucketName output %v", got)
				}
				return
			}
			r := tpl.Resources[ResPayloadBucket]
			if r.DeletionPolicy != "Retain" || r.UpdateReplacePolicy != "Retain" {
				t.Errorf("bucket policies %q/%q, want Retain: it may hold bodies of messages still queued", r.DeletionPolicy, r.UpdateReplacePolicy)
			}
			b := resource[*Bucket](t, tpl, ResPayloadBucket, "AWS::S3::Bucket")
			if diff := cmp.Diff(Sub(o.PayloadBucket.Name), b.BucketName); diff != "" {
				t.Errorf("bucket name (-want +got):\n%s", diff)
			}
			if b.BucketEncryption == nil || len(b.BucketEncryption.ServerSideEncryptionConfiguration) != 1 ||
				b.BucketEncryption.ServerSideEncryptionConfiguration[0].ServerSideEncryptionByDefault.SSEAlgorithm != "AES256" {
				t.Errorf("encryption %+v, want SSE-S3", b.BucketEncryption)
			}
			if p := b.PublicAccessBlockConfiguration; p == nil || !p.BlockPublicAcls || !p.BlockPublicPolicy || !p.IgnorePublicAcls || !p.RestrictPublicBuckets {
				t.Errorf("public access block %+v", p)
			}
			wantRule := LifecycleRule{Id: "expire-payloads", Status: "Enabled", ExpirationInDays: PayloadExpirationDays(o.QueueRetention),
				AbortIncompleteMultipartUpload: &AbortIncompleteMultipartUpload{DaysAfterInitiation: 1}}
			if b.LifecycleConfiguration == nil || len(b.LifecycleConfiguration.Rules) != 1 || !cmp.Equal(wantRule, b.LifecycleConfiguration.Rules[0]) {
				t.Errorf("lifecycle %+v, want %+v", b.LifecycleConfiguration, wantRule)
			}
			policy := resource[*BucketPolicy](t, tpl, ResPayloadBucketPolicy, "AWS::S3::BucketPolicy")
			if s := policy.PolicyDocument.Statement; len(s) != 1 || s[0].Effect != "Deny" || s[0].Condition["Bool"]["aws:SecureTransport"] != "false" {
				t.Errorf("bucket policy %+v, want TLS only", s)
			}
			if got := tpl.Outputs["PayloadBucketName"].Value; !cmp.Equal(got, Ref(ResPayloadBucket)) {
				t.Errorf("PayloadBucketName output %v", got)
			}
		})
	}
}

func TestChoosePayloadBucket(t *testing.T) {
	name, empty := "acme-payloads", ""
	tests := []struct {
		name              string
		created, existing *string
		want              PayloadBucket
		wantErr           string
	}{
		{name: "none", want: PayloadBucket{}},
		{name: "created", created: &name, want: PayloadBucket{Name: name}},
		{name: "existing", existing: &name, want: PayloadBucket{Name: name, Existing: true}},
		{name: "existing empty", existing: &empty, want: PayloadBucket{Existing: true}},
		{name: "both", created: &name, existing: &name, wantErr: "Payload.Buckets and Payload.ExistingBucket: give one"},
		{name: "created empty", created: &empty, wantErr: "Payload.Buckets: give the name of the bucket to create"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChoosePayloadBucket(tt.created, tt.existing)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("ChoosePayloadBucket = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ChoosePayloadBucket = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
