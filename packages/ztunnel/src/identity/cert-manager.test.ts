import { CertificateAuthority, type Credential } from '@zmesh/shared';
import test from 'ava';
import { type CertificateSigner, CertManager } from './cert-manager.js';
import { toCredential } from './credential.js';

const ID = 'spiffe://cluster.local/ns/team-a/sa/client';

/** A signer that can be switched off, like a CA going down. */
class FlakySigner implements CertificateSigner {
  up = true;
  calls = 0;
  constructor(private readonly ca: CertificateAuthority) {}
  async sign(csrPem: string, identity: string, ttlSeconds: number): Promise<string[]> {
    this.calls += 1;
    if (!this.up) throw new Error('CA unreachable');
    return this.ca.signCsr(csrPem, { identity, ttlSeconds });
  }
}

/** CertManager's timers are unref'd (they must not hold a daemon open); the test must. */
function keepAlive(t: { teardown(fn: () => void): void }): void {
  const timer = setInterval(() => {}, 1000);
  t.teardown(() => clearInterval(timer));
}

async function manager(ttlSeconds: number) {
  const signer = new FlakySigner(await CertificateAuthority.create({ trustDomain: 'cluster.local' }));
  const certs = new CertManager({
    signer,
    ttlSeconds,
    toCredential,
    backoff: { initialMs: 100, maxMs: 400 },
    expiringLeadMs: () => 500,
  });
  return { signer, certs };
}

test('a failed renewal keeps the valid certificate, backs off, and emits expiring before not-after', async (t) => {
  keepAlive(t);
  const { signer, certs } = await manager(3);
  t.teardown(() => certs.stop());
  const first = await certs.fetch(ID);
  signer.up = false;
  const expiring = new Promise<[string, Credential, number]>((resolve) =>
    certs.once('expiring', (id: string, cred: Credential) => resolve([id, cred, Date.now()])),
  );
  const [id, cred, at] = await expiring;
  t.is(id, ID);
  t.is(cred, first, 'the held certificate is the expiring one');
  t.true(at < first.notAfter.getTime(), 'announced before it expires');
  t.is(certs.get(ID), first, 'still served while valid');
  const attempts = signer.calls;
  t.true(attempts >= 2, 'renewal was attempted');
  // 100..400 ms backoff over ~1.5 s of failures: a handful of attempts, not a storm.
  t.true(attempts < 15, `attempts: ${attempts}`);
  await new Promise((r) => setTimeout(r, first.notAfter.getTime() - Date.now() + 50));
  t.is(certs.get(ID), undefined, 'an expired certificate is never handed out');
  await t.throwsAsync(certs.fetch(ID));
  signer.up = true;
  const renewed = await certs.fetch(ID);
  t.true(renewed.notAfter > first.notAfter);
});

test("'rotated' names the certificate it replaced", async (t) => {
  keepAlive(t);
  const { certs } = await manager(2);
  t.teardown(() => certs.stop());
  const seen: Array<Credential | undefined> = [];
  certs.on('rotated', (_id: string, _cred: Credential, previous?: Credential) => seen.push(previous));
  const first = await certs.fetch(ID);
  await new Promise<void>((resolve) => certs.on('rotated', () => resolve()));
  t.is(seen[0], undefined);
  t.is(seen[1], first);
});

test('an identity forgotten while its kept credential is looked up asks the CA for nothing', async (t) => {
  const { signer, certs } = await manager(60);
  let answer: (c: Credential | undefined) => void = () => {};
  const saved: string[] = [];
  const store = {
    load: () => new Promise<Credential | undefined>((resolve) => (answer = resolve)),
    save: async (c: Credential) => {
      saved.push(c.identity);
    },
  };
  const stored = new CertManager({ signer, ttlSeconds: 60, toCredential, store });
  t.teardown(() => stored.stop());
  const pending = stored.fetch(ID);
  stored.forget(ID);
  answer(undefined);
  const e = await t.throwsAsync(pending);
  t.regex(e?.message ?? '', /no certificate for/);
  t.is(signer.calls, 0, 'no CSR for a removed identity');
  t.deepEqual(saved, []);
  certs.stop();
});
