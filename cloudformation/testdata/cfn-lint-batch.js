// Lints several templates in one Node process, for lint_test.go: starting Node and loading
// cfn-lint and the specification is most of a lint's time, and the tests lint some seventy
// templates. It calls the linter's API (cfn-lint/lib/api validateFile, which resets the
// linter's state and sets the parameters before each file), the function the CLI's
// `cfn-lint validate FILE --parameters K=V` calls, with the same defaults (parameters without
// a value or default are guessed from their type).
//
//   node cfn-lint-batch.js JOBS RESULTS
//
// JOBS is a JSON array of {"path": FILE, "parameters": {K: V}}; RESULTS is written with a
// JSON array of {"valid", "info", "warn", "crit"}, each finding {"resource", "message"}, or
// {"error"} when the file cannot be parsed. Findings go to a file rather than standard
// output, where the linter's logger writes.
'use strict';

const fs = require('fs');
const api = require('cfn-lint/lib/api');
const resourcesSpec = require('cfn-lint/lib/resourcesSpec');

// Before each template the linter extends the specification with the same types (a Tag type
// under every resource type, and SAM's for a template with its transform) by deep-merging
// them into a deep copy of the whole specification: with the current one, 0.3 s of the 0.35
// s a template takes. The merge gives the same specification when done again, so each
// extension is made once.
const extend = resourcesSpec.extendSpecification;
const extended = new Set();
resourcesSpec.extendSpecification = (spec) => {
  const key = JSON.stringify(spec);
  if (!extended.has(key)) {
    extended.add(key);
    extend(spec);
  }
};

const [jobsFile, resultsFile] = process.argv.slice(2);
const findings = (list) => list.map((f) => ({ resource: f.resource, message: f.message }));
const results = JSON.parse(fs.readFileSync(jobsFile, 'utf8')).map((job) => {
  try {
    const r = api.validateFile(job.path, { parameters: job.parameters || {} });
    return { valid: r.templateValid, info: findings(r.errors.info), warn: findings(r.errors.warn), crit: findings(r.errors.crit) };
  } catch (err) {
    return { error: String(err && err.message) };
  }
});
fs.writeFileSync(resultsFile, JSON.stringify(results));
