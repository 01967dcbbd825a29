import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  describeEvents,
  getTable,
  type ProxyRow,
  proxyStatusTable,
  type RouteRow,
  routeStatusTable,
} from '@zmesh/harness';
import { adminRequest } from '@zmesh/shared';
import test from 'ava';
import { execa, type ResultPromise } from 'execa';
import { limiter, pool } from './helpers/pool.js';

const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
interface R {
  exitCode: number | undefined;
  stdout: string;
  stderr: string;
}
const NO_SOCKET = '/nonexistent/zmesh-cli-discipline.sock';

// The bad-input table: every subcommand's bad input is one line, exit 2 for usage and 1 for
// runtime, no stack trace. Files it needs:
// (Made synchronously: ava wants every test declared before the file's first await.)
const dir = mkdtempSync(join(tmpdir(), 'zmesh-cli-discipline-'));
test.after.always(() => rm(dir, { recursive: true, force: true }));
mkdirSync(join(dir, 'bad'));
mkdirSync(join(dir, 'empty'));
writeFileSync(join(dir, 'bad', 'a.yaml'), 'kind: Namespace\nmetadata: { name: a }\n');
writeFileSync(join(dir, 'bad', 'b.yaml'), 'kind: [unclosed\n');
writeFileSync(join(dir, 'mesh.yaml'), 'workloads: []\n');
writeFileSync(join(dir, 'wp.yaml'), 'waypoint: { name: wp, namespace: shop }\n');
const admin = ['--admin', NO_SOCKET];
// [argv, exit code, what the one line must say, extra environment]
const cases: Array<[string[], number, RegExp, Record<string, string>?]> = [
  [['nosuch'], 2, /^zmesh: unknown command 'nosuch'/],
  [['--bogus'], 2, /^zmesh: unknown option '--bogus'/],
  [['apply'], 2, /^zmesh apply: required option '-f, --file/],
  [['apply', '-f', 'x.yaml', '--bogus'], 2, /^zmesh apply: unknown option '--bogus'/],
  [
    ['apply', '-f', join(dir, 'missing.yaml'), ...admin],
    1,
    /ZM_ERR_CONFIG_INVALID: .*missing\.yaml: no such file/,
  ],
  [['apply', '-f', join(dir, 'empty'), ...admin], 1, /ZM_ERR_CONFIG_INVALID: .*no \.yaml or \.yml file/],
  [['apply', '-f', join(dir, 'bad'), ...admin], 1, /^zmesh apply: ZM_ERR_ADMIN_UNREACHABLE/],
  [['apply', '-f', 'x.yaml', '--admin', '127.77.0.1:15014'], 2, /--admin <socket\|url>.*lacks http:\/\//],
  [['apply', '-f', 'x.yaml', '--admin', 'http://127.77.0.1/x'], 2, /--admin <socket\|url>.*explicit port/],
  [['delete'], 2, /^zmesh delete: give either -f FILE or KIND NAME/],
  [['delete', 'pod', 'a', ...admin], 1, /^zmesh delete: ZM_ERR_ADMIN_UNREACHABLE/],
  [
    ['proxy-status', ...admin],
    1,
    /^zmesh proxy-status: ZM_ERR_ADMIN_UNREACHABLE: .*zmesh-cli-discipline\.sock/,
  ],
  [
    ['proxy-status', '-o', 'xml'],
    2,
    /'-o, --output <format>' argument 'xml' is invalid\. Allowed choices are table, json, yaml/,
  ],
  [['get'], 2, /^zmesh get: missing required argument 'kind'/],
  [['get', 'frobs'], 2, /^zmesh get: unknown kind "frobs": want Namespace, Pod/],
  [['get', 'pods', '-n', 'a', '-A'], 2, /-n and -A exclude each other/],
  [['get', 'pods', '-o', 'csv'], 2, /Allowed choices are table, wide, json, yaml/],
  [['get', 'pods', ...admin], 1, /^zmesh get: ZM_ERR_ADMIN_UNREACHABLE/],
  [['describe', 'pod'], 2, /^zmesh describe: missing required argument 'name'/],
  [['describe', 'all', 'x'], 2, /^zmesh describe: unknown kind "all"/],
  [['describe', 'pod', 'x', ...admin], 1, /^zmesh describe: ZM_ERR_ADMIN_UNREACHABLE/],
  [['ztunnel-config'], 2, /^zmesh ztunnel-config: missing required argument 'kind'/],
  [['ztunnel-config', 'pods'], 2, /'pods' is invalid .*workloads, services, policies, certificates/],
  [['ztunnel-config', 'workloads', '--ztunnel', 'http://x/'], 2, /--ztunnel wants HOST or HOST:PORT/],
  [['ztunnel-config', 'workloads', '-o', 'wide'], 2, /Allowed choices are table, json, yaml/],
  [
    ['ztunnel-config', 'connections', '--ztunnel', '127.86.9.3', '--node', 'a'],
    2,
    /--ztunnel and --node exclude each other/,
  ],
  [
    ['ztunnel-config', 'connections', '--node', 'a', ...admin],
    1,
    /^zmesh ztunnel-config: ZM_ERR_ADMIN_UNREACHABLE/,
  ],
  [['ztunnel-config', 'connections', '--node'], 2, /option '--node <name>' argument missing/],
  [
    ['ztunnel-config', 'workloads', '--ztunnel', '127.86.9.3:1'],
    1,
    /^zmesh ztunnel-config: ZM_ERR_ZTUNNEL_ADMIN_UNREACHABLE: .*127\.86\.9\.3:1 unreachable/,
  ],
  [['x', 'describe', 'pod'], 2, /^zmesh x describe pod: missing required argument 'pod'/],
  [['x', 'describe', 'pod', 'a/b/c'], 2, /^zmesh x describe pod: want NAMESPACE\/NAME/],
  [['x', 'describe', 'pod', 'a/b', '--ztunnel', 'http://x/'], 2, /--ztunnel wants HOST or HOST:PORT/],
  [['x', 'describe', 'pod', 'a/b', '-o', 'wide'], 2, /Allowed choices are text, json, yaml/],
  [['x', 'describe', 'pod', 'a/b', ...admin], 1, /^zmesh x describe pod: ZM_ERR_ADMIN_UNREACHABLE/],
  [['x', 'frob'], 2, /^zmesh x: unknown command 'frob': want describe/],
  [['x'], 2, /^zmesh x: missing command: want describe/],
  [['ns'], 2, /^zmesh ns: missing command: want l7/],
  [['harness', 'nope'], 2, /^zmesh harness: unknown command 'nope': want waypoint-bench, capture-bench/],
  [['dashboard', '--listen', '0.0.0.0:15300'], 2, /^zmesh dashboard: --listen must be a loopback HOST:PORT/],
  [['dashboard', '--bogus'], 2, /^zmesh dashboard: unknown option '--bogus'/],
  [['install', '-o', 'xml'], 2, /argument 'xml' is invalid\. want yaml or json/],
  [
    ['install', '--values', join(dir, 'missing.yaml')],
    1,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: .*missing\.yaml: cannot read: ENOENT/,
  ],
  [['harness', 'noisy-neighbor', '--fairness', 'maybe'], 2, /want on or off or both/],
  [['harness', 'noisy-neighbor', '--rounds', '0'], 2, /'--rounds <n>' argument '0' is invalid/],
  [['harness', 'soak', '--seconds', 'abc'], 2, /^zmesh harness soak: --minutes\/--seconds must give between/],
  [['harness', 'upgrade', '--long-lived', 'abc'], 2, /^zmesh harness upgrade: --long-lived: want 1\.\.500/],
  [['harness', 'capture-bench', '--bogus'], 2, /^zmesh harness capture-bench: unknown option/],
  [['harness', 'waypoint-bench', '--bogus'], 2, /^zmesh harness waypoint-bench: unknown option/],
  [['harness', 'bypass', '--bogus'], 2, /^zmesh harness bypass: unknown option/],
  [['demo', '--bogus'], 2, /^zmesh demo: unknown option/],
  [['bench', '--bogus'], 2, /^zmesh bench: unknown option/],
  [['cluster', 'up', '--nodes', '0'], 2, /'--nodes <n>' argument '0' is invalid/],
  [
    ['cluster', 'up', '--spec', join(dir, 'missing.yaml')],
    1,
    /^zmesh cluster: ZM_ERR_CONFIG_INVALID: .*no such file/,
  ],
  [['ns', 'l7', 'maybe', 'shop'], 2, /^zmesh ns l7: .*'maybe' is invalid .*on, off/],
  [['ns', 'l7', 'on'], 2, /^zmesh ns l7: missing required argument 'namespace'/],
  [
    ['ns', 'l7', 'on', 'shop', '--timeout', 'abc'],
    2,
    /--timeout <seconds>' argument 'abc' is invalid\. want a number 0\.\.120/,
  ],
  [['ns', 'l7', 'on', 'shop', ...admin], 1, /^zmesh ns l7: ZM_ERR_ADMIN_UNREACHABLE/],
  [['cluster'], 2, /^zmesh cluster: missing required argument 'action'/],
  [['version', '--bogus'], 2, /^zmesh version: unknown option '--bogus'/],
  [['ztunnel', '--bogus'], 2, /^zmesh ztunnel: unknown option '--bogus'/],
  [['ztunnel', '--fairness'], 2, /^zmesh ztunnel: option '--fairness <on\|off>' argument missing/],
  [['waypoint', '--bogus'], 2, /^zmesh waypoint: unknown option '--bogus'/],
  [['control-plane', '--bogus'], 2, /^zmesh control-plane: unknown option '--bogus'/],
  [
    ['control-plane', '--admin-port', 'abc'],
    2,
    /'--admin-port <port>' argument 'abc' is invalid\. want an integer 0\.\.65535/,
  ],
  [
    ['control-plane', '--no-state-dir', '--config', join(dir, 'missing')],
    1,
    /^zmesh control-plane: ZM_ERR_CONFIG_INVALID: .*missing/,
  ],
  [
    ['ztunnel', '--fairness', 'maybe'],
    2,
    /'--fairness <on\|off>' argument 'maybe' is invalid\. want on or off/,
  ],
  [['ztunnel', '--passthrough', 'sometimes'], 2, /want allow or deny/],
  [['waypoint', '--port', '70000'], 2, /'--port <port>' argument '70000' is invalid/],
  // 127.86.9.0/24: these cases'; nothing binds, the CA directory is read first.
  [
    [
      'ztunnel',
      '--node',
      'n',
      '--config',
      join(dir, 'mesh.yaml'),
      '--ca-dir',
      join(dir, 'empty'),
      '--address',
      '127.86.9.1',
    ],
    1,
    /^zmesh ztunnel: ZM_ERR_CONFIG_INVALID: .*root-cert\.pem: missing; a CA directory holds/,
  ],
  [
    ['waypoint', '--config', join(dir, 'wp.yaml'), '--ca-dir', join(dir, 'empty'), '--address', '127.86.9.2'],
    1,
    /^zmesh waypoint: ZM_ERR_CONFIG_INVALID: .*root-cert\.pem: missing/,
  ],
  [['cluster', 'sideways'], 2, /Allowed choices are up, down, status/],
  // Added by the issue-37 audit: each subcommand's remaining kinds of bad input.
  [['delete', '--bogus'], 2, /^zmesh delete: unknown option '--bogus'/],
  [
    ['delete', '-f', join(dir, 'missing.yaml'), ...admin],
    1,
    /^zmesh delete: ZM_ERR_CONFIG_INVALID: .*no such file/,
  ],
  [
    ['delete', '-f', join(dir, 'empty'), ...admin],
    1,
    /^zmesh delete: ZM_ERR_CONFIG_INVALID: .*no \.yaml or \.yml file/,
  ],
  [['delete', 'pod', 'a', '--admin', '127.77.0.1:15014'], 2, /--admin <socket\|url>.*lacks http:\/\//],
  [['proxy-status', '--bogus'], 2, /^zmesh proxy-status: unknown option '--bogus'/],
  [['proxy-status', '--admin', '127.77.0.1:15014'], 2, /--admin <socket\|url>.*lacks http:\/\//],
  [['get', 'pods', '--admin', 'http://127.77.0.1/x'], 2, /--admin <socket\|url>.*explicit port/],
  [
    ['describe', 'pod', 'x', '--admin', 'http://127.77.0.1:1', '--admin-token-file', join(dir, 'missing')],
    1,
    /^zmesh describe: ZM_ERR_ADMIN_TOKEN_FILE: .*missing/,
  ],
  [['ztunnel-config', 'workloads', '--ztunnel', '127.0.0.1:abc'], 2, /--ztunnel wants HOST or HOST:PORT/],
  [['ns', 'l7', 'on', 'shop', '--bogus'], 2, /^zmesh ns l7: unknown option '--bogus'/],
  [['dashboard', '--listen', '127.0.0.1:abc'], 2, /^zmesh dashboard: --listen must be a loopback HOST:PORT/],
  [
    ['dashboard', '--ztunnel', 'http://x/'],
    2,
    /^zmesh dashboard: --ztunnel and --waypoint take a proxy's address/,
  ],
  [['install', '--bogus'], 2, /^zmesh install: unknown option '--bogus'/],
  [['install', '--values', join(dir, 'empty')], 1, /^zmesh install: ZM_ERR_INSTALL_INPUT: .*EISDIR/],
  // A file given as an argument is judged as apply -f judges its file: unreadable or bad
  // contents, a runtime failure (exit 1) with its code; a bad flag value, a usage error (exit 2).
  [
    ['install', '--values', join(dir, 'bad', 'b.yaml')],
    1,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: .*b\.yaml: not YAML: /,
  ],
  [
    ['install', '--values', join(dir, 'mesh.yaml')],
    1,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: .*workloads: unknown field/,
  ],
  [
    ['install', '--check-crds', join(dir, 'missing.yaml')],
    1,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: .*cannot read: ENOENT/,
  ],
  [
    ['install', '--namespace', 'Not_A_Name'],
    2,
    /^zmesh install: ZM_ERR_INSTALL_INPUT: .*--namespace: "Not_A_Name"/,
  ],
  [['version', 'extra'], 2, /^zmesh version: too many arguments/],
  [['harness', 'bypass', '--only', 'nosuch'], 2, /^zmesh harness bypass: no attempt id contains "nosuch"/],
  [
    ['cluster', 'up', '--spec', join(dir, 'bad', 'b.yaml')],
    1,
    /^zmesh cluster: ZM_ERR_CLUSTER_SPEC: .*not YAML/,
  ],
  [['cluster', 'up', '--spec', join(dir, 'empty')], 1, /^zmesh cluster: ZM_ERR_CONFIG_INVALID: .*EISDIR/],
  [['node-agent', '--bogus'], 2, /^zmesh node-agent: unknown option '--bogus'/],
  [['node-agent', '--node', 'n', '--rescan', 'abc'], 2, /'--rescan <seconds>' argument 'abc' is invalid/],
  [['node-agent', '--node', 'n', '--port', '70000'], 2, /'--port <port>' argument '70000' is invalid/],
  [
    ['node-agent', '--node', 'n', '--cni-bin-dir', join(dir, 'empty')],
    2,
    /--cni-bin-dir and --cni-conf-dir go together/,
  ],
  [
    [
      'node-agent',
      '--node',
      'n',
      '--kubeconfig',
      join(dir, 'missing'),
      '--port',
      '0',
      '--zds-socket',
      join(dir, 'z.sock'),
      '--cni-socket',
      join(dir, 'c.sock'),
    ],
    1,
    /^zmesh node-agent: ZM_ERR_CONFIG_INVALID: .*missing: ENOENT/,
  ],
  [
    [
      'node-agent',
      '--node',
      'n',
      '--kubeconfig',
      join(dir, 'empty'),
      '--port',
      '0',
      '--zds-socket',
      join(dir, 'z.sock'),
      '--cni-socket',
      join(dir, 'c.sock'),
    ],
    1,
    /^zmesh node-agent: ZM_ERR_CONFIG_INVALID: .*EISDIR/,
  ],
  // A file that cannot be read stops the start before a state directory or a CA is made.
  [
    [
      'control-plane',
      '--admin-port',
      '0',
      '--admin-token-file',
      join(dir, 'missing'),
      '--state-dir',
      join(dir, 'state'),
    ],
    1,
    /^zmesh control-plane: ZM_ERR_ADMIN_TOKEN_FILE: .*missing/,
  ],
  [
    ['control-plane', '--kubernetes', '--kubeconfig', join(dir, 'missing'), '--no-state-dir'],
    1,
    /^zmesh control-plane: ZM_ERR_CONFIG_INVALID: .*kubeconfig .*missing/,
  ],
  // A config file that is not YAML or holds bad values: a runtime failure with its code, as
  // apply -f's file (the flags are the usage).
  [
    [
      'waypoint',
      '--config',
      join(dir, 'bad', 'b.yaml'),
      '--ca-dir',
      join(dir, 'empty'),
      '--address',
      '127.86.9.2',
    ],
    1,
    /^zmesh waypoint: ZM_ERR_CONFIG_INVALID: invalid config \S+b\.yaml: YAML: /,
  ],
  [
    [
      'waypoint',
      '--config',
      join(dir, 'mesh.yaml'),
      '--ca-dir',
      join(dir, 'empty'),
      '--address',
      '127.86.9.2',
    ],
    1,
    /^zmesh waypoint: ZM_ERR_CONFIG_INVALID: invalid config \S+mesh\.yaml: waypoint\.name: must be a non-empty string/,
  ],
  [
    [
      'waypoint',
      '--config',
      join(dir, 'missing.yaml'),
      '--ca-dir',
      join(dir, 'empty'),
      '--address',
      '127.86.9.2',
    ],
    1,
    /^zmesh waypoint: ZM_ERR_CONFIG_INVALID: invalid config \S+missing\.yaml: cannot read: ENOENT/,
  ],
  [
    ['ztunnel', '--node', 'n', '--config', join(dir, 'bad', 'b.yaml'), '--ca-dir', join(dir, 'empty')],
    1,
    /^zmesh ztunnel: ZM_ERR_CONFIG_INVALID: invalid config \S+b\.yaml: YAML: /,
  ],
  [
    ['ztunnel', '--node', 'n', '--config', join(dir, 'wp.yaml'), '--ca-dir', join(dir, 'empty')],
    1,
    /^zmesh ztunnel: ZM_ERR_CONFIG_INVALID: invalid config \S+wp\.yaml: .*waypoint/,
  ],
  // The control plane's --config is a directory: one with a file that is not YAML is refused
  // whole before it serves (its own log lines are not the error; ZMESH_LOG=error keeps them out).
  [
    [
      'control-plane',
      '--no-state-dir',
      '--config',
      join(dir, 'bad'),
      '--port',
      '0',
      '--admin-port',
      '0',
      '--admin-socket',
      join(dir, 'cp.sock'),
    ],
    1,
    /^zmesh control-plane: ZM_ERR_CONFIG_INVALID: invalid config config directory: \S+b\.yaml#0: /,
    { ZMESH_LOG: 'error' },
  ],
  [
    [
      'ztunnel',
      '--node',
      'n',
      '--xds',
      '127.0.0.1:1',
      '--token-file',
      join(dir, 'missing'),
      '--roots-file',
      join(dir, 'missing'),
    ],
    1,
    /^zmesh ztunnel: ZM_ERR_CONFIG_INVALID: invalid config --token-file: ENOENT/,
  ],
  [
    [
      'waypoint',
      '--xds',
      '127.0.0.1:1',
      '--gateway',
      'shop/wp',
      '--address',
      '127.86.9.2',
      '--token-file',
      join(dir, 'missing'),
      '--roots-file',
      join(dir, 'missing'),
    ],
    1,
    /^zmesh waypoint: ZM_ERR_CONFIG_INVALID: invalid config --token-file: ENOENT/,
  ],
  [
    [
      'ztunnel',
      '--node',
      'n',
      '--xds',
      '127.0.0.1:1',
      '--token-file',
      join(dir, 'mesh.yaml'),
      '--roots-file',
      join(dir, 'missing'),
    ],
    1,
    /^zmesh ztunnel: ZM_ERR_CONFIG_INVALID: invalid config --roots-file: \S+missing: ENOENT/,
    // The roots-file watcher logs its own warning; the error is the one line beside it.
    { ZMESH_LOG: 'error' },
  ],
  [['harness', 'outage', '--duration', 'soon'], 2, /'--duration <seconds>' argument 'soon' is invalid/],
];
// Each case is a Node start that loads the CLI's modules: the first to load one leaves V8's
// compiled code in a cache for the others (a seventh less CPU over the table).
const CLI_ENV = { ZMESH_DEBUG: '', NODE_COMPILE_CACHE: join(dir, 'compile-cache') };
// In tests of ten cases (each one's end restarts ava's timeout), four zmesh processes at once in all.
const slot = limiter(4);
for (let from = 0; from < cases.length; from += 10) {
  const chunk = cases.slice(from, from + 10);
  test(`bad input is one line, exit 2 for usage and 1 for runtime, no stack trace: ${chunk.map(([a]) => a.slice(0, 2).join(' ')).join(', ')}`, async (t) => {
    const results = await Promise.all(
      chunk.map(([argv, , , env]) =>
        slot(() => execa(ZMESH, argv, { reject: false, timeout: 60_000, env: { ...CLI_ENV, ...env } })),
      ),
    );
    chunk.forEach(([argv, code, want], i) => {
      const r = results[i]!;
      const what = `zmesh ${argv.join(' ')}: ${r.stderr}`;
      t.is(r.exitCode, code, what);
      const lines = r.stderr.split('\n').filter((l) => l.trim() !== '');
      t.is(lines.length, 1, what);
      t.regex(lines[0] ?? '', want, what);
      t.notRegex(r.stderr, /\n\s+at |Error:/, what);
    });
  });
}

test('--version prints what zmesh version prints; --help has an example; ZMESH_DEBUG=1 adds the stack', async (t) => {
  const [flag, cmd, help, debug] = await Promise.all([
    execa(ZMESH, ['--version']),
    execa(ZMESH, ['version']),
    execa(ZMESH, ['get', '--help']),
    execa(ZMESH, ['proxy-status', '--admin', NO_SOCKET], { reject: false, env: { ZMESH_DEBUG: '1' } }),
  ]);
  t.is(flag.stdout, cmd.stdout);
  t.regex(flag.stdout, /^zmesh \S+ \(commit /);
  t.regex(help.stdout, /Examples:\n {2}\$ zmesh get pods -n shop/);
  t.is(debug.exitCode, 1);
  t.regex(debug.stderr, /ZM_ERR_ADMIN_UNREACHABLE/);
});

const CONFIG_A = `kind: Namespace
metadata: { name: team-b, labels: { istio.io/dataplane-mode: ambient } }
---
kind: Pod
metadata: { name: server, namespace: team-b, labels: { app: server } }
spec: { serviceAccountName: server, nodeName: node-a }
status: { podIP: 127.73.2.1 }
`;
const CONFIG_B = `kind: Service
metadata: { name: server, namespace: team-b }
spec: { clusterIP: 127.73.96.10, selector: { app: server }, ports: [{ port: 80, targetPort: 7000 }] }
`;

test('apply -f DIR and -f -, then get as a table, wide, json, and a refused directory', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-get-'));
  const started: ResultPromise[] = [];
  t.teardown(async () => {
    for (const p of started) p.kill('SIGTERM');
    await Promise.allSettled(started);
    await rm(dir, { recursive: true, force: true });
  });
  const admin = join(dir, 'admin.sock');
  // 127.73.0.0/16 is this file's.
  started.push(
    execa(
      ZMESH,
      ['control-plane', '--host', '127.73.0.1', '--port', '25730', '--admin-socket', admin, '--no-state-dir'],
      { reject: false },
    ),
  );
  // Generous: on a loaded 2-core machine the control plane takes seconds to start.
  const deadline = Date.now() + 30_000;
  while ((await adminRequest({ admin }, '/healthz').catch(() => undefined))?.ok !== true) {
    if (Date.now() > deadline) throw new Error('control plane did not start');
    await new Promise((r) => setTimeout(r, 50));
  }
  await mkdir(join(dir, 'cfg'));
  await writeFile(join(dir, 'cfg', '1-ns.yaml'), CONFIG_A);
  await writeFile(join(dir, 'cfg', 'README.md'), 'not YAML, not read\n');
  const applied = await execa(ZMESH, ['apply', '-f', join(dir, 'cfg'), '--admin', admin], { reject: false });
  t.is(applied.exitCode, 0, applied.stderr);
  const stdin = await execa(ZMESH, ['apply', '-f', '-', '--admin', admin], {
    input: CONFIG_B,
    reject: false,
  });
  t.is(stdin.exitCode, 0, stdin.stderr);
  t.regex(stdin.stdout, /^applied - \(generation \d+\)$/);

  await mkdir(join(dir, 'bad'));
  await writeFile(join(dir, 'bad', 'pod.yaml'), CONFIG_A.replace('127.73.2.1', 'not-an-ip'));
  const bad = await execa(ZMESH, ['apply', '-f', join(dir, 'bad'), '--admin', admin], { reject: false });
  const runs = await pool(
    [
      ['describe', 'pod', 'server', '-n', 'team-b'],
      ['get', 'pods', '-n', 'team-b'],
      ['get', 'all', '-A'],
      ['get', 'pod', 'server', '-n', 'team-b', '-o', 'wide'],
      ['get', 'services', '-n', 'team-b', '-o', 'json'],
      ['get', 'pods'],
      ['get', 'pod', 'nope', '-n', 'team-b'],
      ['describe', 'svc', 'server', '-n', 'team-b'],
      ['describe', 'pod', 'nope', '-n', 'team-b'],
      ['get', 'svc', 'server', '-n', 'team-b', '-o', 'yaml'],
    ],
    3,
    (argv) =>
      execa(ZMESH, [...argv, '--admin', admin], { reject: false, timeout: 30_000 }).then(
        (r): R => ({ exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }),
      ),
  );
  const [refusedPod, pods, all, wide, json, none, missing, described, undescribed, yaml] = runs.map((r) => {
    if (r === undefined) throw new Error('no result');
    return r;
  }) as [R, R, R, R, R, R, R, R, R, R];
  t.regex(
    yaml.stdout,
    /^generation: \d+\nobjects:\n {2}- kind: Service\n {4}metadata:\n {6}name: server\n {6}namespace: team-b\n {6}labels: \{\}\n {6}creationTimestamp: \d{4}-\d\d-\d\dT[\d:.]+Z\n/,
  );

  t.is(bad.exitCode, 1);
  t.regex(bad.stderr, /^zmesh apply: ZM_ERR_CONFIG_INVALID: refused .*bad, nothing changed/);
  // The refusal is an event on the object it named (which keeps its applied version).
  t.is(refusedPod.exitCode, 0, refusedPod.stderr);
  t.regex(
    refusedPod.stdout,
    /\n {2}Warning +Refused +\d+s +apply +\S+bad#1 \(Pod team-b\/server\): status\.podIP\[0\]: "not-an-ip" is not an IP address\n {2}Normal +Served/,
  );
  // AGE is kubectl's (the last column here): its value follows the clock.
  const aged = (s: string) => s.replace(/ {3}\d+[smhd]$/gm, '   <age>');
  t.is(
    aged(pods.stdout),
    [
      'NAMESPACE   NAME     SUMMARY                               AGE',
      'team-b      server   node=node-a sa=server ip=127.73.2.1   <age>',
    ].join('\n'),
  );
  t.is(
    aged(all.stdout),
    [
      'KIND        NAMESPACE   NAME     SUMMARY                               AGE',
      'Namespace   -           team-b   mode=ambient                          <age>',
      'Pod         team-b      server   node=node-a sa=server ip=127.73.2.1   <age>',
      'Service     team-b      server   clusterIP=127.73.96.10                <age>',
    ].join('\n'),
  );
  t.regex(
    wide.stdout,
    /^NAMESPACE +NAME +SUMMARY +AGE +LABELS\nteam-b +server +node=node-a .* +\d+[smhd] +app=server$/,
  );
  const parsed = JSON.parse(json.stdout) as { generation: number; objects: Array<{ kind: string }> };
  t.deepEqual(
    parsed.objects.map((o) => o.kind),
    ['Service'],
  );
  t.is(none.stdout, '');
  t.is(none.stderr, 'no resources found in namespace default');
  t.is(missing.exitCode, 1);
  t.is(missing.stderr, 'no Pod nope in namespace team-b');
  t.is(described.exitCode, 0, described.stderr);
  t.is(
    described.stdout.replace(/creationTimestamp: \S+/, 'creationTimestamp: <time>'),
    [
      'kind: Service',
      'metadata:',
      '  name: server',
      '  namespace: team-b',
      '  labels: {}',
      '  creationTimestamp: <time>',
      'spec:',
      '  clusterIPs:',
      '    - 127.73.96.10',
      '  ports:',
      '    - port: 80',
      '      targetPort: 7000',
      '  selector:',
      '    app: server',
      '',
      'Events:',
      '  TYPE     REASON   AGE   FROM   MESSAGE',
      '  Normal   Served   -     -      0 of 0 connected proxies are in sync with the current config',
    ].join('\n'),
  );
  t.is(undescribed.exitCode, 1);
  t.is(undescribed.stderr, 'zmesh describe: no Pod nope in namespace team-b');

  const status = await execa(ZMESH, ['proxy-status', '--admin', admin]);
  t.is(status.stdout, 'no proxies');
});

test('golden: describe events (NACKed, pending, a waypoint not ready)', (t) => {
  const pod = { kind: 'Pod', metadata: { name: 'web', namespace: 'shop' } };
  const proxies: ProxyRow[] = [
    {
      proxy: 'ztunnel~node-a',
      node: 'node-a',
      connected: true,
      lastContactSecondsAgo: 1,
      refused: null,
      types: {
        'type.googleapis.com/istio.workload.Address': {
          sent: 3,
          acked: 2,
          nacked: { version: 3, reason: 'bad address' },
          pending: { count: 1, names: ['Kubernetes//Pod/shop/web'] },
          rejected: [{ name: 'Kubernetes//Pod/shop/web', reason: 'bad address' }],
          state: 'NACKED',
        } as ProxyRow['types'][string],
      },
    },
  ];
  const gateway = { kind: 'Gateway', metadata: { name: 'waypoint', namespace: 'shop' } };
  const waypoints = [{ waypoint: 'shop/waypoint', users: 2, ackedBy: [], ready: false }];
  const recorded = [
    {
      time: '2026-12-04T11:59:00.000Z',
      type: 'Warning',
      reason: 'Refused',
      from: 'web.yaml',
      message: 'web.yaml#0 (Pod shop/web): status.podIPs: 10.0.0.9 is also the IP of Pod/shop/db',
    },
    {
      time: '2026-12-04T11:59:50.000Z',
      type: 'Normal',
      reason: 'WaypointBound',
      from: 'control-plane',
      message: 'uses waypoint shop/waypoint',
    },
  ];
  t.deepEqual(describeEvents(pod, proxies, waypoints, recorded, Date.parse('2026-12-04T12:00:00Z')), [
    [
      'Warning',
      'Refused',
      '60s',
      'web.yaml',
      'web.yaml#0 (Pod shop/web): status.podIPs: 10.0.0.9 is also the IP of Pod/shop/db',
    ],
    ['Normal', 'WaypointBound', '10s', 'control-plane', 'uses waypoint shop/waypoint'],
    [
      'Warning',
      'NACKed',
      '-',
      'ztunnel~node-a',
      'istio.workload.Address Kubernetes//Pod/shop/web: bad address',
    ],
    [
      'Normal',
      'Pending',
      '-',
      'ztunnel~node-a',
      'istio.workload.Address Kubernetes//Pod/shop/web: sent, not yet ACKed',
    ],
  ]);
  t.deepEqual(describeEvents(gateway, [], waypoints), [
    [
      'Warning',
      'WaypointNotReady',
      '-',
      '-',
      '2 workloads/services use it; no connected waypoint has ACKed its config (fail closed)',
    ],
  ]);
});

test('golden: the proxy-status table', (t) => {
  const rows: ProxyRow[] = [
    {
      proxy: 'ztunnel~node-a',
      node: 'node-a',
      connected: true,
      lastContactSecondsAgo: 3.2,
      refused: null,
      types: {
        'type.googleapis.com/istio.workload.Address': {
          sent: 7,
          acked: 7,
          nacked: null,
          pending: { count: 0 },
          state: 'SYNCED',
        },
        'type.googleapis.com/istio.security.Authorization': {
          sent: 4,
          acked: 3,
          nacked: { version: 4, reason: 'bad rule' },
          pending: { count: 1 },
          state: 'NACKED',
        },
      },
    },
    {
      proxy: 'ztunnel~node-b',
      node: 'node-b',
      connected: false,
      lastContactSecondsAgo: 7300,
      refused: { reason: 'token names node-c', secondsAgo: 7300 },
      types: {},
    },
  ];
  t.is(
    proxyStatusTable(rows),
    [
      'PROXY                           TYPE                           SENT   ACKED   NACKED                        PENDING   AGE',
      'ztunnel~node-a                  istio.security.Authorization   4      3       4: bad rule                   1         3s',
      'ztunnel~node-a                  istio.workload.Address         7      7       -                             0         3s',
      'ztunnel~node-b (disconnected)   -                              -      -       REFUSED: token names node-c   -         2h',
    ].join('\n'),
  );
  t.is(
    getTable(
      [
        {
          kind: 'Gateway',
          metadata: { name: 'wp', namespace: 'shop', creationTimestamp: '2026-12-04T08:30:00Z' },
          spec: { gatewayClassName: 'istio-waypoint' },
        },
      ],
      { wide: false, kindColumn: false },
      Date.parse('2026-12-04T12:00:00Z'),
    ),
    'NAMESPACE   NAME   SUMMARY                AGE\nshop        wp     class=istio-waypoint   3h',
  );
});

test('golden: the routes table under proxy-status, and a route described (Accepted, ResolvedRefs)', (t) => {
  const routes: RouteRow[] = [
    {
      kind: 'HTTPRoute',
      namespace: 'shop',
      name: 'web',
      parents: [
        {
          parentRef: { kind: 'Service', namespace: 'shop', name: 'web', port: 80 },
          waypoint: 'shop/waypoint',
          conditions: [
            {
              type: 'Accepted',
              status: 'True',
              reason: 'Accepted',
              message: 'programmed in waypoint shop/waypoint',
            },
            {
              type: 'ResolvedRefs',
              status: 'False',
              reason: 'BackendNotFound',
              message: 'no Service shop/gone: requests sent there are answered 500',
            },
          ],
        },
      ],
    },
    {
      kind: 'GRPCRoute',
      namespace: 'shop',
      name: 'rpc',
      parents: [
        {
          parentRef: { kind: 'Service', namespace: 'shop', name: 'plain' },
          waypoint: null,
          conditions: [
            {
              type: 'Accepted',
              status: 'False',
              reason: 'NoMatchingParent',
              message:
                'Service shop/plain uses no waypoint (istio.io/use-waypoint): nothing programs this route',
            },
            {
              type: 'ResolvedRefs',
              status: 'True',
              reason: 'ResolvedRefs',
              message: 'every backend resolved',
            },
          ],
        },
      ],
    },
    { kind: 'HTTPRoute', namespace: 'shop', name: 'orphan', parents: [] },
  ];
  t.is(
    routeStatusTable(routes),
    [
      'ROUTE                   PARENT               ACCEPTED                   RESOLVED-REFS             MESSAGE',
      'HTTPRoute shop/web      Service shop/web     True                       False (BackendNotFound)   no Service shop/gone: requests sent there are answered 500',
      'GRPCRoute shop/rpc      Service shop/plain   False (NoMatchingParent)   True                      Service shop/plain uses no waypoint (istio.io/use-waypoint): nothing programs this route',
      'HTTPRoute shop/orphan   (no parentRefs)      -                          -                         -',
    ].join('\n'),
  );
  const route = { kind: 'HTTPRoute', metadata: { name: 'web', namespace: 'shop' } };
  t.deepEqual(describeEvents(route, [], [], [], 0, routes), [
    ['Normal', 'Served', '-', '-', '0 of 0 connected proxies are in sync with the current config'],
    ['Normal', 'Accepted', '-', 'Service shop/web', 'programmed in waypoint shop/waypoint'],
    [
      'Warning',
      'ResolvedRefs=False: BackendNotFound',
      '-',
      'Service shop/web',
      'no Service shop/gone: requests sent there are answered 500',
    ],
  ]);
});
