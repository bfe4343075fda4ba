// `allure generate` with specgate's gate outcome in the report's Quality Gates tab.
//
//   node generate.mjs ALLURE_CLI RESULTS CONFIG GATE
//
// ALLURE_CLI is the pinned install's node_modules/allure/cli.js, RESULTS an allure-results
// folder, CONFIG the Allure config (JSON) and GATE the rules specgate read from the run's
// verdict.json (specgate/report/quality_gate.py): {"rules": [{rule, expected, actual, success,
// message}]}.
//
// Allure 3 fills the Quality Gates tab from the results its quality gate sends to the report's
// store (realtimeDispatcher.sendQualityGateResults); only `allure run` sends them
// (packages/cli/src/commands/commons/run.ts), after its test process, while `allure generate`
// validates nothing (commands/commons/generate.ts). This does what `generate` does, plus what
// `run` does once its tests are read: validate the configured rules and send what failed.
// Each rule here is one of specgate's: its outcome is the verdict's, not a count of results.

import { readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const main = async () => {
  const [cli, results, configPath, gatePath] = process.argv.slice(2);
  if (!gatePath) {
    throw new Error("usage: node generate.mjs ALLURE_CLI RESULTS CONFIG GATE");
  }
  const corePath = join(dirname(cli), "..", "@allurereport", "core", "dist", "index.js");
  const core = await import(pathToFileURL(corePath).href);
  const gate = JSON.parse(await readFile(gatePath, "utf8"));
  const use = gate.rules.map((r) => ({
    rule: r.rule,
    message: () => r.message,
    validate: async () => ({ success: r.success, actual: r.actual }),
  }));
  const config = await core.readConfig(process.cwd(), configPath);
  config.qualityGate = {
    rules: [Object.fromEntries(gate.rules.map((r) => [r.rule, r.expected]))],
    use,
  };
  const report = new core.AllureReport(config);
  await report.start();
  await report.readDirectory(resolve(results));
  const trs = await report.store.allTestResults({ includeRetries: false });
  const { results: failed } = await report.validate({ trs, knownIssues: [] });
  if (failed.length) {
    report.realtimeDispatcher.sendQualityGateResults(failed);
  }
  // On Node 20, done() writes the report and appends the history line, then never settles:
  // AllureLocalHistory.appendHistory awaits historyFile.close() on a file handle whose read
  // stream was never closed (packages/core/src/history.ts:168). `allure generate` exits all the
  // same, when Node has nothing left to do; so does this: nothing waits on done() at the top.
  await report.done();
};

main().catch((error) => {
  console.error(error instanceof Error ? error.message : String(error));
  process.exitCode = 1;
});
