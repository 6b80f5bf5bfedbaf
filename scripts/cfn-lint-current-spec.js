// Preloaded into the pinned cfn-lint (node --require) by scripts/lint-template, which users and
// cloudformation/lint_test.go lint with: replaces the linter's bundled resource specification
// with the current one.
//
// cfn-lint 1.9.7 bundles CloudFormation resource specification 2.29.0 (2019) and reads it,
// once, as require('cfn-lint/lib/awsData').awsResources; every check looks it up there at the
// time it runs. The current specification comes from the npm package @aws-cdk/aws-service-spec,
// pinned in package.json and package-lock.json, which the AWS CDK builds from the CloudFormation
// registry schemas and republishes as they change. AWS no longer publishes the old format, and
// the last @aws-cdk/cfnspec (2.105.0-alpha.0, specification 130.1.0, 2023) predates properties
// the template uses, such as the metric math of target tracking
// (AWS::ApplicationAutoScaling::ScalingPolicy CustomizedMetricSpecification Metrics).
//
// The package holds a database, not the old JSON document, so this file writes the old
// document from it: every resource type becomes a ResourceTypes entry and every type
// definition a PropertyTypes entry named "Resource::Type.Name", with Required from
// `required` and UpdateType from `causesReplacement`. A type becomes PrimitiveType (string
// String, integer Integer, number Double, boolean Boolean, json Json, date-time Timestamp),
// Type (a type definition, or Tag), or Type List or Map with PrimitiveItemType or ItemType.
// Where that format cannot say what the current specification says, this file adapts, and
// only there:
//
//   - A union of types (about 100 properties) gets one type, since the linter checks one:
//     the type the property had in the old specification when the package remembers it
//     (the first of previousTypes), else Json when json is among the choices (the linter's
//     Json takes an object or a string holding one, which is what those unions allow), else
//     the first choice. In the watchbot template these are the IAM policy documents and the
//     SQS redrive policies, json-or-string now and Json before, so Json, as they were.
//   - A list or map of lists or maps (about 25 properties, none in the template) checks its
//     inner collections as Json; the old format has no nested collections.
//   - AWS::CloudFormation::CustomResource keeps AdditionalProperties, which cfn-lint's own
//     copy adds so that a custom resource may take any property.
//   - The AWS::Serverless transform's resources are left out: cfn-lint brings its own
//     specification of them and adds it only to templates that use the transform.
//   - Documentation, which cfn-lint prints under a finding, is the address of the type's page
//     in the CloudFormation user guide, built from the pattern of its names (the package has
//     the text, not the address); properties have none, which is all that costs.
//
// A kind of type this file does not know throws, so a new version of the package that
// changes the format stops the lint tests instead of weakening them.
//
// Loading the package and writing the document takes about 0.5 s of a 1.1 s lint; the tests
// lint some forty times. So the document is kept in node_modules/.cache/watchbot-cfn-lint/
// under a name made of the package's version and a hash of this file: a new version or an
// edit here writes a new one (and removes the old), and npm ci starts afresh.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const { loadAwsServiceSpecSync } = require('@aws-cdk/aws-service-spec');
const { version } = require('@aws-cdk/aws-service-spec/package.json');

const primitives = {
  string: 'String',
  integer: 'Integer',
  number: 'Double',
  boolean: 'Boolean',
  json: 'Json',
  'date-time': 'Timestamp',
};

const updateTypes = { yes: 'Immutable', maybe: 'Conditional', no: 'Mutable' };

const guide = 'https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/';

// docPage names the user guide page of a resource type ("AWS::SQS::Queue") or a property
// type ("AWS::ECS::TaskDefinition.ContainerDefinition").
function docPage(name) {
  const page = name.replace(/^AWS::/, '').replace(/::|\./g, '-').toLowerCase();
  return guide + (name.includes('.') ? 'aws-properties-' : 'aws-resource-') + page + '.html';
}

function convert(db) {
  const resourceTypes = {};
  const propertyTypes = {
    Tag: {
      Documentation: guide + 'aws-properties-resource-tags.html',
      Properties: {
        Key: { PrimitiveType: 'String', Required: true, UpdateType: 'Mutable' },
        Value: { PrimitiveType: 'String', Required: true, UpdateType: 'Mutable' },
      },
    },
  };

  // typeOf returns the old format's fields for a type; definitions collects the type
  // definitions it refers to, to be written under the resource's name.
  function typeOf(type, previousTypes, definitions) {
    switch (type.type) {
      case 'ref': {
        const definition = db.get('typeDefinition', type.reference);
        definitions.add(definition);
        return { Type: definition.name };
      }
      case 'tag':
        return { Type: 'Tag' };
      case 'array':
      case 'map': {
        const item = typeOf(type.element, undefined, definitions);
        const collection = { Type: type.type === 'array' ? 'List' : 'Map' };
        if (item.PrimitiveType) {
          return { ...collection, PrimitiveItemType: item.PrimitiveType };
        }
        if (item.Type === 'List' || item.Type === 'Map') {
          return { ...collection, PrimitiveItemType: 'Json' };
        }
        return { ...collection, ItemType: item.Type };
      }
      case 'union': {
        const [oldest] = previousTypes || [];
        if (oldest && oldest.type !== 'union') {
          return typeOf(oldest, undefined, definitions);
        }
        if (type.types.some((t) => t.type === 'json')) {
          return { PrimitiveType: 'Json' };
        }
        return typeOf(type.types[0], undefined, definitions);
      }
      default:
        if (primitives[type.type]) {
          return { PrimitiveType: primitives[type.type] };
        }
        throw new Error(`cfn-lint-current-spec.js: type ${JSON.stringify(type)} is of a kind this file does not know`);
    }
  }

  function propertiesOf(properties, definitions) {
    const out = {};
    for (const [name, property] of Object.entries(properties)) {
      out[name] = {
        ...typeOf(property.type, property.previousTypes, definitions),
        Required: property.required === true,
        UpdateType: updateTypes[property.causesReplacement || 'no'],
      };
    }
    return out;
  }

  for (const resource of db.all('resource')) {
    if (resource.cloudFormationTransform) {
      continue;
    }
    const name = resource.cloudFormationType;
    const attributes = {};
    for (const [attribute, spec] of Object.entries(resource.attributes)) {
      const { Type, PrimitiveType, PrimitiveItemType } = typeOf(spec.type, spec.previousTypes, new Set());
      attributes[attribute] = Type === 'List' ? { Type, PrimitiveItemType: PrimitiveItemType || 'Json' } : { PrimitiveType: PrimitiveType || 'Json' };
    }
    const definitions = new Set();
    resourceTypes[name] = {
      Documentation: docPage(name),
      Attributes: attributes,
      Properties: propertiesOf(resource.properties, definitions),
    };
    // A Set's walk visits what is added during it: the type definitions that type
    // definitions refer to are written too, each once.
    for (const definition of definitions) {
      const typeName = `${name}.${definition.name}`;
      propertyTypes[typeName] = {
        Documentation: docPage(typeName),
        Properties: propertiesOf(definition.properties, definitions),
      };
    }
  }
  resourceTypes['AWS::CloudFormation::CustomResource'].AdditionalProperties = true;

  return {
    ResourceSpecificationVersion: `@aws-cdk/aws-service-spec ${version}`,
    PropertyTypes: propertyTypes,
    ResourceTypes: resourceTypes,
  };
}

// cached returns the document from the cache, writing it there first when it is missing.
// A file is renamed into place whole, so lints running at once never read half of one.
function cached() {
  const dir = path.join(require.resolve('@aws-cdk/aws-service-spec/package.json'), '..', '..', '..', '.cache', 'watchbot-cfn-lint');
  const hash = crypto.createHash('sha256').update(fs.readFileSync(__filename)).digest('hex').slice(0, 16);
  const name = `spec-${version}-${hash}.json`;
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8'));
  } catch (err) {
    if (err.code !== 'ENOENT') {
      throw err;
    }
  }
  const spec = convert(loadAwsServiceSpecSync());
  fs.mkdirSync(dir, { recursive: true });
  const partial = path.join(dir, `${name}.${process.pid}`);
  fs.writeFileSync(partial, JSON.stringify(spec));
  fs.renameSync(partial, path.join(dir, name));
  for (const old of fs.readdirSync(dir)) {
    if (old.startsWith('spec-') && old.endsWith('.json') && old !== name) {
      fs.rmSync(path.join(dir, old), { force: true });
    }
  }
  return spec;
}

require('cfn-lint/lib/awsData').awsResources = cached();
