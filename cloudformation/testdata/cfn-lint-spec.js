// Preloaded into the pinned cfn-lint (node --require) by lint_test.go.
//
// cfn-lint 1.9.7 bundles CloudFormation resource specification 2.29.0 (2019), which predates
// three properties the watchbot template uses; without them it reports each as "not a valid
// property" (crit). This file adds exactly those three, with the types the current AWS
// CloudFormation resource specification gives them, and nothing else: every other check of
// the linter runs unchanged.
//
// - AWS::SQS::Queue SqsManagedSseEnabled (Boolean), added 2021:
//   https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-sqs-queue.html#cfn-sqs-queue-sqsmanagedsseenabled
// - AWS::SQS::Queue RedriveAllowPolicy (Json), added 2021:
//   https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-sqs-queue.html#cfn-sqs-queue-redriveallowpolicy
// - AWS::ECS::TaskDefinition ContainerDefinition StopTimeout (Integer), added 2019:
//   https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-ecs-taskdefinition-containerdefinition.html#cfn-ecs-taskdefinition-containerdefinition-stoptimeout
'use strict';

const spec = require('cfn-lint/lib/awsData').awsResources;

function add(properties, name, definition) {
  if (!properties) {
    throw new Error('cfn-lint-spec.js: the bundled specification changed; review this file');
  }
  if (properties[name]) {
    return; // a newer cfn-lint knows it already
  }
  properties[name] = Object.assign({ Required: false, UpdateType: 'Mutable' }, definition);
}

const queue = spec.ResourceTypes['AWS::SQS::Queue'].Properties;
add(queue, 'SqsManagedSseEnabled', {
  PrimitiveType: 'Boolean',
  Documentation: 'https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-sqs-queue.html#cfn-sqs-queue-sqsmanagedsseenabled',
});
add(queue, 'RedriveAllowPolicy', {
  PrimitiveType: 'Json',
  Documentation: 'https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-sqs-queue.html#cfn-sqs-queue-redriveallowpolicy',
});
add(spec.PropertyTypes['AWS::ECS::TaskDefinition.ContainerDefinition'].Properties, 'StopTimeout', {
  PrimitiveType: 'Integer',
  Documentation: 'https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-ecs-taskdefinition-containerdefinition.html#cfn-ecs-taskdefinition-containerdefinition-stoptimeout',
});
