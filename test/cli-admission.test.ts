import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { adminRequest } from '@zmesh/shared';
import test, { type ExecutionContext } from 'ava';
import { execa, type ResultPromise } from 'execa';

/**
 * Admission and the secured admin API, end to end: the real `zmesh` CLI against a real
 * `zmesh control-plane` child. 127.77.0.0/16 is this file's (the TCP admin port).
 */
const ZMESH = resolve(import.meta.dirname, '../../bin/zmesh');
const TCP_HOST = '127.77.0.1';
const TCP_PORT = 25_777;
const TOKEN = 'cli-admission-token-0123456789abcdef';

const BASE = `apiVersion: v1
kind: Namespace
metadata: { name: team-b, labels: { istio.io/dataplane-mode: ambient } }
---
kind: Pod
metadata: { name: server, namespace: team-b, labels: { app: server } }
spec: { serviceAccountName: server, nodeName: node-a }
status: { podIP: 127.77.2.1 }
---
kind: Service
metadata: { name: server, namespace: team-b }
spec: { clusterIP: 127.77.96.10, selector: { app: server }, ports: [{ port: 80, targetPort: 7000 }] }
`;

/** The typos of the issue: a DENY whose `principal` (not `principals`) and `DENNY` went unnoticed. */
const TYPOS = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-typo, namespace: team-b }
spec:
  action: DENY
  selector: { matchLabels: { app: server } }
  rules:
    - from:
        - source: { principal: ["cluster.local/ns/team-a/sa/client"] }
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-enum, namespace: team-b }
spec:
  action: DENNY
  selector: { matchLabels: { app: server } }
`;

const GOOD_POLICY = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-good, namespace: team-b }
spec:
  action: DENY
  selector: { matchLabels: { app: server } }
  rules:
    - from:
        - source: { principals: ["cluster.local/ns/team-a/sa/client"] }
`;

const WAYPOINT = `kind: Gateway
metadata: { name: waypoint, namespace: team-b }
spec: { gatewayClassName: istio-waypoint, addresses: [{ value: 127.77.3.1 }] }
`;

interface Cp {
  dir: string;
  admin: string;
  child: ResultPromise;
}

async function startCp(t: ExecutionContext, extra: string[] = []): Promise<Cp> {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-admission-'));
  await mkdir(join(dir, 'cfg'));
  const admin = join(dir, 'run', 'admin.sock');
  const child = execa(
    ZMESH,
    ['control-plane', '-c', join(dir, 'cfg'), '--socket', join(dir, 'xds.sock'), '--no-state-dir'].concat(
      ['--admin-socket', admin],
      extra,
    ),
    { reject: false, env: { ZMESH_LOG: 'info' } },
  );
  t.teardown(async () => {
    child.kill('SIGTERM');
    await child;
    await rm(dir, { recursive: true, force: true });
  });
  await new Promise<void>((resolve, reject) => {
    let seen = '';
    child.stderr?.on('data', (d: Buffer) => {
      seen += d.toString();
      if (seen.includes('admin on')) resolve();
    });
    void child.then((r) => reject(new Error(`control plane exited ${r.exitCode}: ${seen}`)));
  });
  return { dir, admin, child };
}

async function zmesh(args: string[]) {
  return execa(ZMESH, args, { reject: false, timeout: 30_000 });
}

async function file(cp: Cp, name: string, text: string): Promise<string> {
  const path = join(cp.dir, name);
  await writeFile(path, text);
  return path;
}

const metrics = async (cp: Cp) => (await adminRequest({ admin: cp.admin }, '/metrics')).text;

test('zmesh apply refuses what the control plane would not serve: every reason, exit 1, nothing changed, counted', async (t) => {
  const cp = await startCp(t);
  t.is((await stat(cp.admin)).mode & 0o777, 0o600);
  const base = await file(cp, 'base.yaml', BASE);
  const ok = await zmesh(['apply', '-f', base, '--admin', cp.admin]);
  t.is(ok.exitCode, 0, ok.stderr);
  t.regex(ok.stdout, /^applied .*base\.yaml \(generation 2\)$/);

  const typos = await file(cp, 'typos.yaml', `${GOOD_POLICY}---\n${TYPOS}`);
  const refused = await zmesh(['apply', '-f', typos, '--admin', cp.admin]);
  t.is(refused.exitCode, 1);
  t.is(refused.stdout, '');
  t.deepEqual(refused.stderr.split('\n'), [
    `zmesh apply: ZM_ERR_CONFIG_INVALID: refused ${typos}, nothing changed (2 reasons):`,
    `${typos}#1 (AuthorizationPolicy team-b/deny-typo): spec.rules[0].from[0].source.principal: unknown field`,
    `${typos}#2 (AuthorizationPolicy team-b/deny-enum): spec.action: must be one of ALLOW, DENY, AUDIT, CUSTOM, got "DENNY"`,
  ]);
  t.notRegex(refused.stderr, /at .*\.js:\d+/, 'no stack trace');
  // Atomic: the valid policy in the same file was not stored either.
  const again = await zmesh(['apply', '-f', base, '--admin', cp.admin]);
  t.regex(again.stdout, /\(generation 3\)$/, 'only the accepted applies made generations');
  const text = await metrics(cp);
  t.regex(text, /^zmesh_cp_config_rejections_total\{source="apply"\} 1$/m);
  t.regex(text, /^zmesh_cp_config_generation 3$/m);

  // A use-waypoint that names no waypoint Gateway is refused too.
  const dangling = await file(
    cp,
    'dangling.yaml',
    BASE.replace('dataplane-mode: ambient', 'dataplane-mode: ambient, istio.io/use-waypoint: nope'),
  );
  const r = await zmesh(['apply', '-f', dangling, '--admin', cp.admin]);
  t.is(r.exitCode, 1);
  t.regex(
    r.stderr,
    /#0 \(Namespace \/team-b\): metadata\.labels\.istio\.io\/use-waypoint: names waypoint team-b\/nope/,
  );
});

test('zmesh delete: by KIND NAME -n NS and by -f FILE; a missing object refuses the whole delete', async (t) => {
  const cp = await startCp(t);
  const base = await file(cp, 'base.yaml', BASE);
  const policy = await file(cp, 'policy.yaml', GOOD_POLICY);
  t.is((await zmesh(['apply', '-f', base, '--admin', cp.admin])).exitCode, 0);
  t.is((await zmesh(['apply', '-f', policy, '--admin', cp.admin])).exitCode, 0);

  const one = await zmesh([
    'delete',
    'authorizationpolicy',
    'deny-good',
    '-n',
    'team-b',
    '--admin',
    cp.admin,
  ]);
  t.is(one.exitCode, 0, one.stderr);
  t.regex(one.stdout, /^deleted authorizationpolicy team-b\/deny-good \(generation 4\)$/);
  const gone = await zmesh([
    'delete',
    'AuthorizationPolicy',
    'deny-good',
    '-n',
    'team-b',
    '--admin',
    cp.admin,
  ]);
  t.is(gone.exitCode, 1);
  t.deepEqual(gone.stderr.split('\n').slice(1), ['AuthorizationPolicy/team-b/deny-good: not found']);

  const both = await file(cp, 'both.yaml', `${BASE}---\n${GOOD_POLICY}`);
  const partial = await zmesh(['delete', '-f', both, '--admin', cp.admin]);
  t.is(partial.exitCode, 1, 'deny-good is already gone: nothing of the file is deleted');
  const status = (await adminRequest({ admin: cp.admin }, '/metrics')).text;
  t.regex(status, /^zmesh_cp_config_generation 4$/m);
  const all = await zmesh(['delete', '-f', base, '--admin', cp.admin]);
  t.is(all.exitCode, 0, all.stderr);
  t.regex(await metrics(cp), /^zmesh_cp_config_generation 5$/m);

  const usage = await zmesh(['delete', '--admin', cp.admin]);
  t.is(usage.exitCode, 2);
  t.is(
    usage.stderr,
    'zmesh delete: give either -f FILE or KIND NAME (with -n NS), not both (see zmesh delete --help)',
  );
});

test('zmesh ns l7 on: refused without a waypoint Gateway; with one but no waypoint running, times out naming it, and proxy-status, the gauge and the log say so', async (t) => {
  const cp = await startCp(t);
  let log = '';
  cp.child.stderr?.on('data', (d: Buffer) => {
    log += d.toString();
  });
  t.is((await zmesh(['apply', '-f', await file(cp, 'base.yaml', BASE), '--admin', cp.admin])).exitCode, 0);
  const none = await zmesh(['ns', 'l7', 'on', 'team-b', '--admin', cp.admin]);
  t.is(none.exitCode, 1);
  t.deepEqual(none.stderr.split('\n'), [
    'zmesh ns l7: ZM_ERR_CONFIG_INVALID: refused L7 on for team-b, nothing changed (1 reasons):',
    'namespace team-b has no waypoint: no Gateway team-b/waypoint with gatewayClassName istio-waypoint is in the config; apply one and start its waypoint, then retry',
  ]);

  t.is((await zmesh(['apply', '-f', await file(cp, 'wp.yaml', WAYPOINT), '--admin', cp.admin])).exitCode, 0);
  const started = Date.now();
  const on = await zmesh(['ns', 'l7', 'on', 'team-b', '--timeout', '1', '--admin', cp.admin]);
  t.true(Date.now() - started >= 1000, 'it waited for the waypoint');
  t.is(on.exitCode, 1);
  t.regex(on.stdout, /L7 on \(version \d+\), acked by 0 proxies; TIMED OUT after 1s waiting for 1:/);
  t.regex(
    on.stderr,
    /not acked: waypoint team-b\/waypoint \(NOT_CONNECTED: no waypoint for this Gateway is connected/,
  );

  const status = await zmesh(['proxy-status', '--admin', cp.admin]);
  t.is(status.exitCode, 0);
  t.regex(
    status.stderr,
    /^waypoint team-b\/waypoint: NOT READY: 2 users kept on their previous path until it ACKs/m,
  );
  t.notRegex(status.stderr, /fail closed/, 'nothing is cut: they stay direct');
  t.regex(await metrics(cp), /^zmesh_cp_waypoints_not_ready 1$/m);
  t.regex(await metrics(cp), /^zmesh_cp_waypoint_users_held 2$/m);
  t.regex(log, /"waypoint":"team-b\/waypoint","users":0,"held":2,"msg":"waypoint not ready/);
});

test('admin API: an unreachable socket is one line; TCP needs a token file, and requests without the token get 401', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'zmesh-cli-admission-tcp-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const nowhere = await zmesh(['proxy-status', '--admin', join(dir, 'none.sock')]);
  t.is(nowhere.exitCode, 1);
  t.regex(
    nowhere.stderr,
    /^zmesh proxy-status: ZM_ERR_ADMIN_UNREACHABLE: control-plane admin endpoint .*none\.sock unreachable: connect ENOENT/,
  );
  t.is(nowhere.stderr.split('\n').length, 1);

  const noToken = await zmesh([
    'control-plane',
    '--no-state-dir',
    '--socket',
    join(dir, 'x.sock'),
    '--admin-port',
    String(TCP_PORT),
  ]);
  t.is(noToken.exitCode, 1);
  t.regex(
    noToken.stderr,
    /ZM_ERR_ADMIN_TOKEN_FILE: admin token file \(none\): a TCP admin port needs --admin-token-file/,
  );
  await writeFile(join(dir, 'short'), 'abc\n');
  const short = await zmesh(
    [
      'control-plane',
      '--no-state-dir',
      '--socket',
      join(dir, 'x.sock'),
      '--admin-port',
      String(TCP_PORT),
    ].concat(['--admin-token-file', join(dir, 'short')]),
  );
  t.is(short.exitCode, 1);
  t.regex(short.stderr, /ZM_ERR_ADMIN_TOKEN_FILE: .*at least 16 characters/);

  const tokenFile = join(dir, 'token');
  await writeFile(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
  await startCp(t, ['--host', TCP_HOST, '--admin-port', String(TCP_PORT), '--admin-token-file', tokenFile]);
  const url = `http://${TCP_HOST}:${TCP_PORT}`;
  const anonymous = await zmesh(['proxy-status', '--admin', url]);
  t.is(anonymous.exitCode, 1);
  t.regex(anonymous.stderr, /^zmesh proxy-status: ZM_ERR_ADMIN_UNAUTHORIZED: /);
  const mint = await fetch(`${url}/node-token?node=n1`, { method: 'POST' });
  t.is(mint.status, 401, 'minting a node token is an admin act');
  const authorized = await zmesh([
    'proxy-status',
    '--admin',
    url,
    '--admin-token-file',
    tokenFile,
    '-o',
    'json',
  ]);
  t.is(authorized.exitCode, 0, authorized.stderr);
  t.deepEqual(JSON.parse(authorized.stdout), { proxies: [], routes: [] });
  t.is((await fetch(`${url}/healthz/ready`)).status, 200, 'probes need no token');
});

test('zmesh proxy-status names what the control plane holds but does not serve as written, with why', async (t) => {
  const cp = await startCp(t);
  t.is((await zmesh(['apply', '-f', await file(cp, 'base.yaml', BASE), '--admin', cp.admin])).exitCode, 0);
  // Admitted (it is valid Istio), but a ztunnel cannot enforce HTTP attributes: the rule is dropped.
  const l7 = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: allow-get, namespace: team-b }
spec:
  action: ALLOW
  selector: { matchLabels: { app: server } }
  rules: [{ to: [{ operation: { methods: ["GET"] } }] }]
`;
  t.is((await zmesh(['apply', '-f', await file(cp, 'l7.yaml', l7), '--admin', cp.admin])).exitCode, 0);
  const status = await zmesh(['proxy-status', '--admin', cp.admin]);
  t.is(status.exitCode, 0);
  t.regex(
    status.stderr,
    /^AuthorizationPolicy\/team-b\/allow-get: NOT SERVED by the control plane: ztunnel does not support HTTP attributes \(found: methods\)/m,
  );
  const deleted = await zmesh([
    'delete',
    'AuthorizationPolicy',
    'allow-get',
    '-n',
    'team-b',
    '--admin',
    cp.admin,
  ]);
  t.is(deleted.exitCode, 0, deleted.stderr);
  t.deepEqual((await adminRequest({ admin: cp.admin }, '/not-served')).json(), [], 'gone with the policy');
});
