package cloudformation

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// PayloadBucket is the S3 bucket that holds the bodies too large for SQS: producers (`watchbot
// send --payload-bucket`, or the SQS Extended Client libraries) write a body there and send a
// pointer to it, and listen fetches the body and deletes it once the message is done (see
// docs/payloads.md).
//
// With Existing false the stack creates the bucket, named Name, and configures it as payloads
// need: encrypted, public access blocked, objects expiring once no message can point at them
// (PayloadExpirationDays). With Existing true the bucket is the user's: the stack only grants
// access to it and passes it to listen, and its configuration is the owner's to choose.
type PayloadBucket struct {
	// Name is the bucket's name. It may contain ${AWS::AccountId} and ${AWS::Region}, so that
	// one template deploys in several accounts and regions (bucket names are global).
	Name string
	// Existing says the bucket exists: the stack neither creates nor configures it.
	Existing bool
}

// ChoosePayloadBucket returns the bucket of the one name given: created, the name of a bucket
// the stack creates, or existing, one it uses; nil is a name not given. Both given is refused,
// as is a bucket to create without a name.
func ChoosePayloadBucket(created, existing *string) (PayloadBucket, error) {
	switch {
	case created != nil && existing != nil:
		return PayloadBucket{}, setting.Refuse("", nil, setting.Ref(listenspec.SettingPayloadBuckets)+" and "+setting.Ref(setting.ExistingPayloadBucket)+
			": give one, the bucket the stack creates or the one it uses")
	case existing != nil:
		return PayloadBucket{Name: *existing, Existing: true}, nil
	case created != nil && *created == "":
		return PayloadBucket{}, setting.Refuse(listenspec.SettingPayloadBuckets, nil, "give the name of the bucket to create")
	case created != nil:
		return PayloadBucket{Name: *created}, nil
	}
	return PayloadBucket{}, nil
}

// Logical ids of the payload bucket's resources.
const (
	ResPayloadBucket         = "PayloadBucket"
	ResPayloadBucketPolicy   = "PayloadBucketPolicy"
	ResPayloadProducerPolicy = "PayloadProducerPolicy"
)

// PayloadTaskActions are what listen calls on the payload bucket with the task role: it
// reads a message's body and deletes it once the message is done. s3:ListBucket on the bucket
// is what makes S3 answer a missing object with NoSuchKey rather than AccessDenied ("GetObject",
// Amazon S3 API Reference, Permissions), so a dead-lettered message says which it was.
var PayloadTaskActions = []string{"s3:DeleteObject", "s3:GetObject"}

// PayloadProducerActions are what a producer calls: `watchbot send` writes the body, and
// deletes it again when the message pointing at it could not be sent, so nothing is left
// behind. A producer able to write objects can overwrite them anyway, so deleting adds
// nothing it could not do already.
var PayloadProducerActions = []string{"s3:DeleteObject", "s3:PutObject"}

// PayloadExpirationDays is after how many days the created bucket's lifecycle rule deletes an
// object: the work queue's retention plus the dead-letter queue's, rounded up to whole days
// (S3's unit). A message can point at its object that long: for the work queue's retention,
// then in the dead-letter queue, whose retention counts from the message's first enqueue
// (so at most DeadLetterRetention in all), then for the work queue's retention again after
// a replay at the last moment.
func PayloadExpirationDays(queueRetention time.Duration) int {
	const day = 24 * time.Hour
	total := queueRetention + DeadLetterRetention
	return int((total + day - 1) / day)
}

// payloadNameVariables are the pseudo parameters a bucket name may contain, with the longest
// value each can take, which the name's length is checked with.
var payloadNameVariables = map[string]string{
	"${AWS::AccountId}": "123456789012",
	"${AWS::Region}":    "ap-southeast-1", // region names have at most 14 characters
}

var (
	bucketNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	bucketVariable    = regexp.MustCompile(`\$\{[^}]*\}`)
	// Prefixes and suffixes S3 reserves ("General purpose bucket naming rules", Amazon S3
	// User Guide).
	bucketReservedPrefixes = []string{"xn--", "sthree-", "amzn-s3-demo-"}
	bucketReservedSuffixes = []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"}
)

// validate checks the bucket's name against S3's naming rules, with each pseudo parameter at
// its longest. A created bucket may not have dots: S3 advises against them, since a dot breaks
// the TLS certificate of virtual-hosted-style requests.
func (b PayloadBucket) validate() error {
	refused := listenspec.SettingPayloadBuckets
	if b.Existing {
		refused = setting.ExistingPayloadBucket
	}
	if b.Name == "" {
		if b.Existing {
			return setting.Refuse(refused, b.Name, "must name a bucket")
		}
		return nil
	}
	for _, v := range bucketVariable.FindAllString(b.Name, -1) {
		if _, ok := payloadNameVariables[v]; !ok {
			return setting.Refuse(refused, b.Name, fmt.Sprintf("may contain only ${AWS::AccountId} and ${AWS::Region}, not %s", v))
		}
	}
	name := b.Name
	for v, longest := range payloadNameVariables {
		name = strings.ReplaceAll(name, v, longest)
	}
	switch {
	case !bucketNamePattern.MatchString(name):
		return setting.Refuse(refused, b.Name, "is not an S3 bucket name: 3 to 63 lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit")
	case strings.Contains(name, ".."):
		return setting.Refuse(refused, b.Name, "is not an S3 bucket name: two dots in a row")
	case isIPv4(name):
		return setting.Refuse(refused, b.Name, "is not an S3 bucket name: it looks like an IP address")
	case !b.Existing && strings.Contains(name, "."):
		return setting.Refuse(refused, b.Name, "has a dot: a dot breaks TLS for virtual-hosted-style requests to the bucket, so S3 advises against it")
	}
	for _, p := range bucketReservedPrefixes {
		if strings.HasPrefix(name, p) {
			return setting.Refuse(refused, b.Name, "starts with "+p+", which S3 reserves")
		}
	}
	for _, s := range bucketReservedSuffixes {
		if strings.HasSuffix(name, s) {
			return setting.Refuse(refused, b.Name, "ends with "+s+", which S3 reserves")
		}
	}
	return nil
}

func isIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}

// HasPayloadBucket says whether the stack holds payloads in S3.
func (o Options) HasPayloadBucket() bool { return o.PayloadBucket.Name != "" }

// templateName is the bucket's name in the template: a Ref of the created bucket, or the
// existing bucket's name.
func (b PayloadBucket) templateName() any {
	if !b.Existing {
		return Ref(ResPayloadBucket)
	}
	return sub(b.Name)
}

// payloadARNs returns the ARNs of the bucket and of its objects, in Fn::Sub syntax.
func (g *generator) payloadARNs() (bucket, objects string) {
	name := g.o.PayloadBucket.Name
	if !g.o.PayloadBucket.Existing {
		name = "${" + ResPayloadBucket + "}"
	}
	bucket = "arn:${AWS::Partition}:s3:::" + name
	return bucket, bucket + "/*"
}

// payloads adds the payload bucket, when the stack creates it, and the managed policy a
// producer attaches to write to it. The task role's policy is added by roles, listen's flag by
// ListenArgs.
func (g *generator) payloads() {
	if !g.o.HasPayloadBucket() {
		return
	}
	bucketARN, objectsARN := g.payloadARNs()
	if !g.o.PayloadBucket.Existing {
		// Retained with the stack: it may still hold the bodies of messages in flight or
		// dead-lettered, and CloudFormation cannot delete a bucket that is not empty. The
		// lifecycle rule empties it.
		g.add(ResPayloadBucket, Resource{Type: "AWS::S3::Bucket", DeletionPolicy: "Retain", UpdateReplacePolicy: "Retain", Properties: &Bucket{
			BucketName: sub(g.o.PayloadBucket.Name),
			BucketEncryption: &BucketEncryption{ServerSideEncryptionConfiguration: []ServerSideEncryptionRule{{
				ServerSideEncryptionByDefault: ServerSideEncryptionByDefault{SSEAlgorithm: "AES256"},
			}}},
			PublicAccessBlockConfiguration: &PublicAccessBlockConfiguration{
				BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true,
			},
			OwnershipControls: &OwnershipControls{Rules: []OwnershipControlsRule{{ObjectOwnership: "BucketOwnerEnforced"}}},
			LifecycleConfiguration: &LifecycleConfiguration{Rules: []LifecycleRule{{
				Id:               "expire-payloads",
				Status:           "Enabled",
				ExpirationInDays: PayloadExpirationDays(g.o.QueueRetention),
				// send writes with one PutObject; a part upload another producer abandoned
				// is never an object, and would otherwise be kept (and billed) for ever.
				AbortIncompleteMultipartUpload: &AbortIncompleteMultipartUpload{DaysAfterInitiation: 1},
			}}},
		}})
		g.add(ResPayloadBucketPolicy, Resource{Type: "AWS::S3::BucketPolicy", Properties: &BucketPolicy{
			Bucket: Ref(ResPayloadBucket),
			PolicyDocument: PolicyDocument{Version: policyVersion, Statement: []Statement{{
				Sid: "TLSOnly", Effect: "Deny", Principal: map[string]any{"AWS": "*"}, Action: []string{"s3:*"},
				Resource:  []any{Sub(bucketARN), Sub(objectsARN)},
				Condition: map[string]map[string]any{"Bool": {"aws:SecureTransport": "false"}},
			}}},
		}})
	}
	g.add(ResPayloadProducerPolicy, Resource{Type: "AWS::IAM::ManagedPolicy", Properties: &ManagedPolicy{
		Description: "Lets a producer (watchbot send --payload-bucket, an SQS Extended Client) write message bodies to the payload bucket. " +
			"Attach it to the producer's role with the SQS permissions it already has.",
		PolicyDocument: PolicyDocument{Version: policyVersion, Statement: []Statement{
			{Sid: "WritePayloads", Effect: "Allow", Action: PayloadProducerActions, Resource: []any{Sub(objectsARN)}},
		}},
	}})
}

// payloadPolicies returns the task role's policy on the payload bucket, if any.
func (g *generator) payloadPolicies() []RolePolicy {
	if !g.o.HasPayloadBucket() {
		return nil
	}
	bucketARN, objectsARN := g.payloadARNs()
	return []RolePolicy{{PolicyName: "watchbot-payloads", PolicyDocument: PolicyDocument{Version: policyVersion, Statement: []Statement{
		{Sid: "ReadAndDeletePayloads", Effect: "Allow", Action: PayloadTaskActions, Resource: []any{Sub(objectsARN)}},
		{Sid: "TellMissingPayloads", Effect: "Allow", Action: []string{"s3:ListBucket"}, Resource: []any{Sub(bucketARN)}},
	}}}}
}

// payloadListenArgs returns listen's flag naming the bucket, if any.
func payloadListenArgs(o Options) []any {
	if !o.HasPayloadBucket() {
		return nil
	}
	return []any{"--payload-bucket", o.PayloadBucket.templateName()}
}

// payloadOutputs adds the bucket's name and the producer policy's ARN to outputs.
func (g *generator) payloadOutputs(outputs map[string]Output) {
	if !g.o.HasPayloadBucket() {
		return
	}
	outputs["PayloadBucketName"] = Output{Description: "S3 bucket of the bodies too large for SQS (watchbot send --payload-bucket)", Value: g.o.PayloadBucket.templateName()}
	outputs["PayloadProducerPolicyArn"] = Output{Description: "Managed policy a producer's role attaches to write bodies to the payload bucket", Value: Ref(ResPayloadProducerPolicy)}
}
