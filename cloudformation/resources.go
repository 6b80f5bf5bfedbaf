package cloudformation

// Property structs of the resource types the template uses. Fields holding a value that may
// be computed at deploy time are typed any, to take a literal or an intrinsic function (Fn).

// Queue is the Properties of AWS::SQS::Queue.
type Queue struct {
	QueueName                     any                 `json:"QueueName"`
	FifoQueue                     bool                `json:"FifoQueue,omitempty"`
	ContentBasedDeduplication     bool                `json:"ContentBasedDeduplication,omitempty"`
	VisibilityTimeout             int                 `json:"VisibilityTimeout"`
	MessageRetentionPeriod        int                 `json:"MessageRetentionPeriod"`
	ReceiveMessageWaitTimeSeconds int                 `json:"ReceiveMessageWaitTimeSeconds"`
	SqsManagedSseEnabled          bool                `json:"SqsManagedSseEnabled"`
	RedrivePolicy                 *RedrivePolicy      `json:"RedrivePolicy,omitempty"`
	RedriveAllowPolicy            *RedriveAllowPolicy `json:"RedriveAllowPolicy,omitempty"`
}

// RedrivePolicy sends a message to the dead-letter queue after MaxReceiveCount receives.
type RedrivePolicy struct {
	DeadLetterTargetArn any `json:"deadLetterTargetArn"`
	MaxReceiveCount     int `json:"maxReceiveCount"`
}

// RedriveAllowPolicy says which queues may use a queue as their dead-letter queue.
type RedriveAllowPolicy struct {
	RedrivePermission string `json:"redrivePermission"`
	SourceQueueArns   []any  `json:"sourceQueueArns"`
}

// LogGroup is the Properties of AWS::Logs::LogGroup.
type LogGroup struct {
	RetentionInDays int `json:"RetentionInDays"`
}

// Role is the Properties of AWS::IAM::Role.
type Role struct {
	AssumeRolePolicyDocument PolicyDocument `json:"AssumeRolePolicyDocument"`
	ManagedPolicyArns        []any          `json:"ManagedPolicyArns,omitempty"`
	Policies                 []RolePolicy   `json:"Policies,omitempty"`
}

// RolePolicy is an inline policy of a role.
type RolePolicy struct {
	PolicyName     string         `json:"PolicyName"`
	PolicyDocument PolicyDocument `json:"PolicyDocument"`
}

// TaskDefinition is the Properties of AWS::ECS::TaskDefinition.
type TaskDefinition struct {
	Family                  any                   `json:"Family"`
	Cpu                     string                `json:"Cpu"`
	Memory                  string                `json:"Memory"`
	NetworkMode             string                `json:"NetworkMode"`
	RequiresCompatibilities []string              `json:"RequiresCompatibilities"`
	ExecutionRoleArn        any                   `json:"ExecutionRoleArn"`
	TaskRoleArn             any                   `json:"TaskRoleArn"`
	ContainerDefinitions    []ContainerDefinition `json:"ContainerDefinitions"`
	Volumes                 []Volume              `json:"Volumes,omitempty"`
}

// ContainerDefinition is one container of a task definition.
type ContainerDefinition struct {
	Name                   string            `json:"Name"`
	Image                  any               `json:"Image"`
	Essential              bool              `json:"Essential"`
	EntryPoint             []string          `json:"EntryPoint"`
	Command                []any             `json:"Command"`
	Environment            []KeyValuePair    `json:"Environment,omitempty"`
	ReadonlyRootFilesystem bool              `json:"ReadonlyRootFilesystem"`
	MountPoints            []MountPoint      `json:"MountPoints,omitempty"`
	StopTimeout            int               `json:"StopTimeout"`
	HealthCheck            *HealthCheck      `json:"HealthCheck,omitempty"`
	LogConfiguration       *LogConfiguration `json:"LogConfiguration,omitempty"`
}

// HealthCheck is a container's health check: Command runs in the container (["CMD", ...]
// execs it directly) and exit 0 means healthy. Durations are in seconds.
type HealthCheck struct {
	Command     []string `json:"Command"`
	Interval    int      `json:"Interval"`
	Timeout     int      `json:"Timeout"`
	Retries     int      `json:"Retries"`
	StartPeriod int      `json:"StartPeriod"`
}

// KeyValuePair is an environment variable of a container.
type KeyValuePair struct {
	Name  string `json:"Name"`
	Value any    `json:"Value"`
}

// MountPoint mounts a task volume into a container.
type MountPoint struct {
	SourceVolume  string `json:"SourceVolume"`
	ContainerPath string `json:"ContainerPath"`
	ReadOnly      bool   `json:"ReadOnly"`
}

// Volume is a task volume; with only a name, Fargate backs it with the task's ephemeral storage.
type Volume struct {
	Name string `json:"Name"`
}

// LogConfiguration is a container's log driver.
type LogConfiguration struct {
	LogDriver string         `json:"LogDriver"`
	Options   map[string]any `json:"Options"`
}

// Service is the Properties of AWS::ECS::Service. It has no DesiredCount: autoscaling owns
// the task count, and a DesiredCount would reset it on every stack update.
type Service struct {
	Cluster                 any                     `json:"Cluster"`
	LaunchType              string                  `json:"LaunchType"`
	TaskDefinition          any                     `json:"TaskDefinition"`
	NetworkConfiguration    NetworkConfiguration    `json:"NetworkConfiguration"`
	DeploymentConfiguration DeploymentConfiguration `json:"DeploymentConfiguration"`
}

// NetworkConfiguration is a service's awsvpc network configuration.
type NetworkConfiguration struct {
	AwsvpcConfiguration AwsvpcConfiguration `json:"AwsvpcConfiguration"`
}

// AwsvpcConfiguration places a service's tasks in subnets with security groups.
type AwsvpcConfiguration struct {
	AssignPublicIp any `json:"AssignPublicIp"`
	Subnets        any `json:"Subnets"`
	SecurityGroups any `json:"SecurityGroups"`
}

// DeploymentConfiguration bounds the tasks running during a deployment (percent of desired).
type DeploymentConfiguration struct {
	MaximumPercent        int `json:"MaximumPercent"`
	MinimumHealthyPercent int `json:"MinimumHealthyPercent"`
}

// ScalableTarget is the Properties of AWS::ApplicationAutoScaling::ScalableTarget.
type ScalableTarget struct {
	ServiceNamespace  string `json:"ServiceNamespace"`
	ScalableDimension string `json:"ScalableDimension"`
	ResourceId        any    `json:"ResourceId"`
	RoleARN           any    `json:"RoleARN"`
	MinCapacity       int    `json:"MinCapacity"`
	MaxCapacity       int    `json:"MaxCapacity"`
}

// ScalingPolicy is the Properties of AWS::ApplicationAutoScaling::ScalingPolicy: a step
// scaling policy (PolicyType StepScaling) or a target tracking one (TargetTrackingScaling).
type ScalingPolicy struct {
	PolicyName                               any                                       `json:"PolicyName"`
	PolicyType                               string                                    `json:"PolicyType"`
	ScalingTargetId                          any                                       `json:"ScalingTargetId"`
	StepScalingPolicyConfiguration           *StepScalingPolicyConfiguration           `json:"StepScalingPolicyConfiguration,omitempty"`
	TargetTrackingScalingPolicyConfiguration *TargetTrackingScalingPolicyConfiguration `json:"TargetTrackingScalingPolicyConfiguration,omitempty"`
}

// TargetTrackingScalingPolicyConfiguration keeps a metric at TargetValue by changing the
// capacity in proportion to it. Cooldowns are in seconds.
type TargetTrackingScalingPolicyConfiguration struct {
	TargetValue                   float64                        `json:"TargetValue"`
	CustomizedMetricSpecification *CustomizedMetricSpecification `json:"CustomizedMetricSpecification"`
	DisableScaleIn                bool                           `json:"DisableScaleIn"`
	ScaleOutCooldown              int                            `json:"ScaleOutCooldown"`
	ScaleInCooldown               int                            `json:"ScaleInCooldown"`
}

// CustomizedMetricSpecification is the tracked metric: with Metrics, a metric-math
// expression over metrics (the query whose ReturnData is true is the one tracked).
type CustomizedMetricSpecification struct {
	Metrics []TargetTrackingMetricDataQuery `json:"Metrics"`
}

// TargetTrackingMetricDataQuery is one metric or expression of a target tracking metric.
// ReturnData is always rendered: every query but the tracked one must say false.
type TargetTrackingMetricDataQuery struct {
	Id         string                    `json:"Id"`
	Expression string                    `json:"Expression,omitempty"`
	Label      string                    `json:"Label,omitempty"`
	MetricStat *TargetTrackingMetricStat `json:"MetricStat,omitempty"`
	ReturnData bool                      `json:"ReturnData"`
}

// TargetTrackingMetricStat is a metric with its statistic; target tracking reads it in
// one-minute periods.
type TargetTrackingMetricStat struct {
	Metric Metric `json:"Metric"`
	Stat   string `json:"Stat"`
}

// StepScalingPolicyConfiguration is a step scaling policy.
type StepScalingPolicyConfiguration struct {
	AdjustmentType        string           `json:"AdjustmentType"`
	Cooldown              int              `json:"Cooldown"`
	MetricAggregationType string           `json:"MetricAggregationType"`
	StepAdjustments       []StepAdjustment `json:"StepAdjustments"`
}

// StepAdjustment is one step: bounds are relative to the alarm's threshold, lower inclusive
// above it, upper inclusive below it; nil is unbounded.
type StepAdjustment struct {
	MetricIntervalLowerBound *float64 `json:"MetricIntervalLowerBound,omitempty"`
	MetricIntervalUpperBound *float64 `json:"MetricIntervalUpperBound,omitempty"`
	ScalingAdjustment        int      `json:"ScalingAdjustment"`
}

// Alarm is the Properties of AWS::CloudWatch::Alarm: either a single metric (Namespace,
// MetricName, Dimensions, Statistic, Period) or metric math (Metrics).
type Alarm struct {
	AlarmName          any               `json:"AlarmName"`
	AlarmDescription   string            `json:"AlarmDescription"`
	Namespace          string            `json:"Namespace,omitempty"`
	MetricName         string            `json:"MetricName,omitempty"`
	Dimensions         []Dimension       `json:"Dimensions,omitempty"`
	Statistic          string            `json:"Statistic,omitempty"`
	Period             int               `json:"Period,omitempty"`
	Metrics            []MetricDataQuery `json:"Metrics,omitempty"`
	EvaluationPeriods  int               `json:"EvaluationPeriods"`
	Threshold          float64           `json:"Threshold"`
	ComparisonOperator string            `json:"ComparisonOperator"`
	TreatMissingData   string            `json:"TreatMissingData"`
	AlarmActions       any               `json:"AlarmActions,omitempty"`
	OKActions          any               `json:"OKActions,omitempty"`
}

// Dimension is a metric dimension.
type Dimension struct {
	Name  string `json:"Name"`
	Value any    `json:"Value"`
}

// MetricDataQuery is one metric or expression of a metric-math alarm.
type MetricDataQuery struct {
	Id         string      `json:"Id"`
	Expression string      `json:"Expression,omitempty"`
	Label      string      `json:"Label,omitempty"`
	MetricStat *MetricStat `json:"MetricStat,omitempty"`
	ReturnData bool        `json:"ReturnData"`
}

// MetricStat is a metric with its statistic and period.
type MetricStat struct {
	Metric Metric `json:"Metric"`
	Period int    `json:"Period"`
	Stat   string `json:"Stat"`
}

// Metric names a CloudWatch metric.
type Metric struct {
	Namespace  string      `json:"Namespace"`
	MetricName string      `json:"MetricName"`
	Dimensions []Dimension `json:"Dimensions"`
}

// Topic is the Properties of AWS::SNS::Topic.
type Topic struct {
	DisplayName  string         `json:"DisplayName"`
	Subscription []Subscription `json:"Subscription,omitempty"`
}

// Subscription is a subscription of a topic.
type Subscription struct {
	Protocol string `json:"Protocol"`
	Endpoint any    `json:"Endpoint"`
}

// SSMParameter is the Properties of AWS::SSM::Parameter.
type SSMParameter struct {
	Type           string `json:"Type"`
	Description    string `json:"Description"`
	Value          string `json:"Value"`
	AllowedPattern string `json:"AllowedPattern"`
}

// DynamoDBTable is the Properties of AWS::DynamoDB::Table. Without TableName, CloudFormation
// names the table from the stack's name and the logical id.
type DynamoDBTable struct {
	AttributeDefinitions    []AttributeDefinition    `json:"AttributeDefinitions"`
	KeySchema               []KeySchemaElement       `json:"KeySchema"`
	BillingMode             string                   `json:"BillingMode"`
	TimeToLiveSpecification *TimeToLiveSpecification `json:"TimeToLiveSpecification,omitempty"`
}

// AttributeDefinition is the type of a key attribute: S, N or B.
type AttributeDefinition struct {
	AttributeName string `json:"AttributeName"`
	AttributeType string `json:"AttributeType"`
}

// KeySchemaElement is one attribute of a table's primary key: HASH (partition key) or RANGE
// (sort key).
type KeySchemaElement struct {
	AttributeName string `json:"AttributeName"`
	KeyType       string `json:"KeyType"`
}

// TimeToLiveSpecification makes DynamoDB delete an item some time after the epoch seconds
// its AttributeName holds have passed.
type TimeToLiveSpecification struct {
	AttributeName string `json:"AttributeName"`
	Enabled       bool   `json:"Enabled"`
}

// Bucket is the Properties of AWS::S3::Bucket.
type Bucket struct {
	BucketName                     any                             `json:"BucketName,omitempty"`
	BucketEncryption               *BucketEncryption               `json:"BucketEncryption,omitempty"`
	PublicAccessBlockConfiguration *PublicAccessBlockConfiguration `json:"PublicAccessBlockConfiguration,omitempty"`
	OwnershipControls              *OwnershipControls              `json:"OwnershipControls,omitempty"`
	LifecycleConfiguration         *LifecycleConfiguration         `json:"LifecycleConfiguration,omitempty"`
}

// BucketEncryption is a bucket's default encryption.
type BucketEncryption struct {
	ServerSideEncryptionConfiguration []ServerSideEncryptionRule `json:"ServerSideEncryptionConfiguration"`
}

// ServerSideEncryptionRule is one default-encryption rule of a bucket.
type ServerSideEncryptionRule struct {
	ServerSideEncryptionByDefault ServerSideEncryptionByDefault `json:"ServerSideEncryptionByDefault"`
}

// ServerSideEncryptionByDefault names the algorithm: AES256 is SSE-S3.
type ServerSideEncryptionByDefault struct {
	SSEAlgorithm string `json:"SSEAlgorithm"`
}

// PublicAccessBlockConfiguration is a bucket's block of public access.
type PublicAccessBlockConfiguration struct {
	BlockPublicAcls       bool `json:"BlockPublicAcls"`
	BlockPublicPolicy     bool `json:"BlockPublicPolicy"`
	IgnorePublicAcls      bool `json:"IgnorePublicAcls"`
	RestrictPublicBuckets bool `json:"RestrictPublicBuckets"`
}

// OwnershipControls says who owns the objects written to a bucket.
type OwnershipControls struct {
	Rules []OwnershipControlsRule `json:"Rules"`
}

// OwnershipControlsRule is one rule of OwnershipControls.
type OwnershipControlsRule struct {
	ObjectOwnership string `json:"ObjectOwnership"`
}

// LifecycleConfiguration holds a bucket's lifecycle rules.
type LifecycleConfiguration struct {
	Rules []LifecycleRule `json:"Rules"`
}

// LifecycleRule is one lifecycle rule; without a filter it applies to every object.
type LifecycleRule struct {
	Id                             string                          `json:"Id"`
	Status                         string                          `json:"Status"`
	ExpirationInDays               int                             `json:"ExpirationInDays,omitempty"`
	AbortIncompleteMultipartUpload *AbortIncompleteMultipartUpload `json:"AbortIncompleteMultipartUpload,omitempty"`
}

// AbortIncompleteMultipartUpload deletes the parts of an upload left unfinished.
type AbortIncompleteMultipartUpload struct {
	DaysAfterInitiation int `json:"DaysAfterInitiation"`
}

// BucketPolicy is the Properties of AWS::S3::BucketPolicy.
type BucketPolicy struct {
	Bucket         any            `json:"Bucket"`
	PolicyDocument PolicyDocument `json:"PolicyDocument"`
}

// ManagedPolicy is the Properties of AWS::IAM::ManagedPolicy; Ref of it is its ARN.
type ManagedPolicy struct {
	Description    string         `json:"Description"`
	PolicyDocument PolicyDocument `json:"PolicyDocument"`
}
