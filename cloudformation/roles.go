package cloudformation

// WorkQueueActions are the SQS actions watchbot listen calls on the work queue (the batch
// calls DeleteMessageBatch and ChangeMessageVisibilityBatch are authorized by the same actions).
var WorkQueueActions = []string{
	"sqs:ChangeMessageVisibility",
	"sqs:DeleteMessage",
	"sqs:GetQueueAttributes",
	"sqs:GetQueueUrl",
	"sqs:ReceiveMessage",
}

// DeadLetterQueueActions are the SQS actions watchbot listen calls on the dead-letter queue:
// dead-lettering by itself (exit 3, --max-message-age), and sampling its depth.
var DeadLetterQueueActions = []string{
	"sqs:GetQueueAttributes",
	"sqs:GetQueueUrl",
	"sqs:SendMessage",
}

// TaskProtectionActions are what the ECS agent calls, with the task role, when listen asks it
// to protect the task from scale-in ($ECS_AGENT_URI/task-protection/v1/state). Both are
// required ("IAM permissions required for task scale-in protection", Amazon ECS Developer
// Guide, "Task scale-in protection").
var TaskProtectionActions = []string{
	"ecs:GetTaskProtection",
	"ecs:UpdateTaskProtection",
}

// ecsTasksTrust lets ECS tasks assume a role; confused limits that to this account's tasks.
func ecsTasksTrust(confused bool) PolicyDocument {
	s := Statement{
		Effect:    "Allow",
		Principal: map[string]any{"Service": "ecs-tasks.amazonaws.com"},
		Action:    []string{"sts:AssumeRole"},
	}
	if confused {
		// Only ECS acting for this account's tasks may assume the role (confused deputy).
		s.Condition = map[string]map[string]any{
			"ArnLike":      {"aws:SourceArn": Sub("arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:*")},
			"StringEquals": {"aws:SourceAccount": Ref("AWS::AccountId")},
		}
	}
	return PolicyDocument{Version: policyVersion, Statement: []Statement{s}}
}

// roles adds the task role, with the least privilege listen and the worker need, and the
// execution role that pulls the image and writes the logs.
func (g *generator) roles() {
	var queueArns, dlqArns []any
	for _, q := range g.workQueues() {
		queueArns, dlqArns = append(queueArns, GetAtt(q.id, "Arn")), append(dlqArns, GetAtt(q.dlqID, "Arn"))
	}
	statements := []Statement{
		{Sid: "WorkQueue", Effect: "Allow", Action: WorkQueueActions, Resource: queueArns},
		{Sid: "DeadLetterQueue", Effect: "Allow", Action: DeadLetterQueueActions, Resource: dlqArns},
		// Task ARNs carry the cluster's name; a task's own id is unknown here, so the tasks
		// of the cluster are as narrow as a template can name (the scope of the AWS CDK's
		// Cluster.grantTaskProtection).
		{Sid: "TaskScaleInProtection", Effect: "Allow", Action: TaskProtectionActions,
			Resource: []any{Sub("arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:task/${" + ParamCluster + "}/*")}},
	}
	if g.o.Metrics == MetricsCloudWatch {
		// PutMetricData has no resource-level permissions; the namespace condition confines it.
		statements = append(statements, Statement{
			Sid: "PublishMetrics", Effect: "Allow", Action: []string{"cloudwatch:PutMetricData"}, Resource: []any{"*"},
			Condition: map[string]map[string]any{"StringEquals": {"cloudwatch:namespace": g.o.MetricsNamespace}},
		})
	}
	policies := []RolePolicy{{PolicyName: "watchbot-listen", PolicyDocument: PolicyDocument{Version: policyVersion, Statement: statements}}}
	policies = append(policies, g.tablePolicies()...)
	policies = append(policies, g.payloadPolicies()...)
	if len(g.o.ExtraStatements) > 0 {
		policies = append(policies, RolePolicy{PolicyName: "extra", PolicyDocument: PolicyDocument{Version: policyVersion, Statement: g.o.ExtraStatements}})
	}
	g.add(ResTaskRole, Resource{Type: "AWS::IAM::Role", Properties: &Role{
		AssumeRolePolicyDocument: ecsTasksTrust(true),
		Policies:                 policies,
	}})
	g.add(ResExecutionRole, Resource{Type: "AWS::IAM::Role", Properties: &Role{
		AssumeRolePolicyDocument: ecsTasksTrust(false),
		ManagedPolicyArns:        []any{Sub("arn:${AWS::Partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy")},
	}})
}
