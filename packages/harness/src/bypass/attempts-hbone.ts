import { CertificateAuthority } from '@zmesh/shared';
import type { Attempt, Outcome } from './attempt.js';
import { APP_PORT, type BypassLab, ID, leafOnly, TRUST_DOMAIN } from './bypass-lab.js';
import { combine, judgeHbone } from './judge.js';
import { moved } from './metric-deltas.js';

type Cred = { keyPem: string; certPem: string };

/**
 * HBONE spoken by an attacker-written client from a pod outside the mesh (its connections
 * are not captured, and 15008 is ztunnel's socket, so strict inbound does not stop it):
 * the TLS and CONNECT checks of the destination ztunnel are all that stand in the way.
 */
const FROM = 'outsider';
export const FROM_OUTSIDER =
  'sent by an in-pod client from the outsider pod (not enrolled: packets leave from its own address)';

function toServer(lab: BypassLab) {
  const server = lab.pod('server');
  return { host: server.ipv4, authority: `${server.ipv4}:${APP_PORT}` };
}

async function handshake(lab: BypassLab, label: string, cred: Cred | undefined): Promise<Outcome> {
  const r = await lab.hbone(lab.pod(FROM), { ...toServer(lab), ...(cred ? { cred } : {}) });
  const o = judgeHbone(label, r);
  o.evidence.push(FROM_OUTSIDER);
  return o;
}

/** Client certificates the destination must refuse at the TLS layer. */
export function certificateAttempts(): Attempt[] {
  return [
    {
      id: 'hbone/no-client-certificate',
      description: 'HBONE CONNECT to a forbidden pod with no client certificate',
      expected: 'denied',
      run: (lab) => handshake(lab, 'no certificate', undefined),
    },
    {
      id: 'hbone/self-signed',
      description: 'HBONE with a self-signed certificate carrying a SPIFFE ID of our trust domain',
      expected: 'denied',
      run: async (lab) => {
        const rogue = await CertificateAuthority.create({ trustDomain: TRUST_DOMAIN });
        return handshake(lab, 'self-signed', { keyPem: await rogue.exportKeyPem(), certPem: rogue.rootPem });
      },
    },
    {
      id: 'hbone/rogue-ca-same-trust-domain',
      description:
        "HBONE with the allowed client's SPIFFE ID, issued by a CA that is not in the trust bundle",
      expected: 'denied',
      run: async (lab) => {
        const rogue = await CertificateAuthority.create({ trustDomain: TRUST_DOMAIN });
        return handshake(lab, 'rogue CA', leafOnly(await rogue.issue(ID.client, 3600)));
      },
    },
    {
      id: 'hbone/other-trust-domain',
      description: 'HBONE with a certificate of another trust domain (its own root)',
      expected: 'denied',
      run: async (lab) => {
        const other = await CertificateAuthority.create({ trustDomain: 'evil.local' });
        return handshake(
          lab,
          'evil.local',
          leafOnly(await other.issue('spiffe://evil.local/ns/team-a/sa/client', 3600)),
        );
      },
    },
    {
      id: 'hbone/other-trust-domain-our-root',
      description:
        'HBONE with a SPIFFE ID of another trust domain signed by our own root (trust-domain check, not chain)',
      expected: 'denied',
      run: async (lab) => {
        const signer = await CertificateAuthority.fromPem({
          trustDomain: 'evil.local',
          keyPem: lab.rootKeyPem,
          certPem: lab.ca.rootPem,
        });
        const cred = leafOnly(await signer.issue('spiffe://evil.local/ns/team-a/sa/client', 3600));
        return handshake(lab, 'evil.local ID, our root', cred);
      },
    },
    {
      id: 'hbone/ca-certificate-as-client',
      description: "HBONE presenting the mesh's own root CA certificate (and key) as the client certificate",
      expected: 'denied',
      run: (lab) => handshake(lab, 'root CA as leaf', { keyPem: lab.rootKeyPem, certPem: lab.ca.rootPem }),
    },
    {
      id: 'hbone/expired-certificate',
      description: "HBONE with the allowed client's certificate from our CA, expired an hour ago",
      expected: 'denied',
      run: async (lab) => {
        const cred = await lab.mint(ID.client, {
          ttlSeconds: 3600,
          notBefore: new Date(Date.now() - 2 * 3600_000),
        });
        return handshake(lab, 'expired', cred);
      },
    },
    {
      id: 'hbone/not-yet-valid-certificate',
      description: "HBONE with the allowed client's certificate from our CA, valid only from tomorrow",
      expected: 'denied',
      run: async (lab) => {
        const cred = await lab.mint(ID.client, {
          ttlSeconds: 3600,
          notBefore: new Date(Date.now() + 24 * 3600_000),
        });
        return handshake(lab, 'not yet valid', cred);
      },
    },
  ];
}

/** Headers a client may send to claim another identity or source address. */
function forgedHeaders(lab: BypassLab): Record<string, string> {
  const client = lab.pod('client');
  return {
    forwarded: `for="${client.ipv4}:40000"`,
    baggage: 'k8s.namespace.name=team-a,k8s.workload.name=client,service.name=client',
    'x-forwarded-for': client.ipv4,
    'x-forwarded-client-cert': `By=${ID.attacker};URI=${ID.client}`,
  };
}

/**
 * A valid certificate for X (the attacker's own identity) that claims Y (the allowed
 * client, by identity and by address) in headers. The target admits Y by principal and
 * by source address, so honouring any header would let it through. Control: the same
 * forged tunnel to a sink that admits anyone must be attributed to X in the metrics.
 */
async function forgedIdentity(lab: BypassLab): Promise<Outcome> {
  const cred = await lab.mint(ID.attacker);
  const headers = forgedHeaders(lab);
  const outsider = lab.pod(FROM);
  const denied = judgeHbone(
    'X claims Y, to server',
    await lab.hbone(outsider, { ...toServer(lab), cred, headers }),
    401,
  );
  const sink = lab.pod('sink');
  const control = await lab.hbone(outsider, {
    host: sink.ipv4,
    authority: `${sink.ipv4}:${APP_PORT}`,
    cred,
    headers,
  });
  const moves = (await lab.moves()).filter((m) => m.node === 'node-b');
  const asX = moved(
    moves,
    'istio_tcp_connections_opened_total',
    'reporter="destination"',
    `source_principal="${ID.attacker}"`,
  );
  const asY = moved(moves, 'istio_tcp_connections_opened_total', `source_principal="${ID.client}"`);
  const evidence = [
    ...denied.evidence,
    `control, same headers to sink (admits anyone): status=${control.status ?? control.error} answer="${control.answer ?? ''}"`,
    `node-b attributed the control tunnel to X (${ID.attacker}) ${asX} time(s), to Y (${ID.client}) ${asY} time(s)`,
  ];
  if (denied.observed === 'delivered' || asY > 0) return { observed: 'delivered', evidence };
  if (asX < 1)
    return { observed: 'error', evidence: [...evidence, 'control not attributed at all: proves nothing'] };
  return { observed: 'denied', evidence };
}

/** Waypoint rules at the destination ztunnel (the waypoint itself is another issue; its identity is config). */
export function identityAttempts(): Attempt[] {
  return noted([
    {
      id: 'hbone/identity-x-claims-y',
      description:
        'HBONE with a valid certificate for X claiming the allowed Y in forwarded/baggage/x-forwarded-*',
      expected: 'denied',
      run: forgedIdentity,
    },
    {
      id: 'hbone/confused-deputy',
      description:
        "HBONE to a permissive pod's ztunnel listener (admits X) with a forbidden pod's address as authority",
      expected: 'denied',
      run: async (lab) => {
        const cred = await lab.mint(ID.attacker);
        const server = lab.pod('server');
        const outcomes: Outcome[] = [];
        for (const authority of [`${server.ipv4}:${APP_PORT}`, `[${server.ipv6}]:${APP_PORT}`]) {
          const r = await lab.hbone(lab.pod(FROM), { host: lab.pod('sink').ipv4, authority, cred });
          outcomes.push(judgeHbone(`via sink's 15008, authority ${authority}`, r, 400));
        }
        return combine(...outcomes);
      },
    },
    {
      id: 'waypoint/forwarded-from-non-waypoint',
      description:
        "HBONE to a waypoint-protected pod with forwarded: for=<allowed client>, from a waypoint identity that is not that pod's waypoint",
      expected: 'denied',
      run: async (lab) => {
        const cred = await lab.mint(ID.otherWaypoint);
        return judgeHbone(
          'other waypoint',
          await lab.hbone(lab.pod(FROM), { ...toGuarded(lab), cred, headers: forgedHeaders(lab) }),
          401,
        );
      },
    },
    {
      id: 'waypoint/skip-by-direct-tunnel',
      description:
        "HBONE straight to a waypoint-protected pod's ztunnel with the (policy-allowed) client's valid certificate",
      expected: 'denied',
      run: skipWaypoint,
    },
    {
      id: 'waypoint/service-vip-at-backend',
      description:
        "HBONE to a waypoint-protected pod's ztunnel with the protected service's VIP as authority",
      expected: 'denied',
      run: async (lab) => {
        const cred = await lab.mint(ID.client);
        const req = { host: lab.pod('guarded').ipv4, authority: '10.244.250.20:80', cred };
        return judgeHbone('VIP authority', await lab.hbone(lab.pod(FROM), req), 400);
      },
    },
  ]);
}

function toGuarded(lab: BypassLab) {
  const guarded = lab.pod('guarded');
  return { host: guarded.ipv4, authority: `${guarded.ipv4}:${APP_PORT}` };
}

async function skipWaypoint(lab: BypassLab): Promise<Outcome> {
  const attempt = judgeHbone(
    'client cert, no waypoint',
    await lab.hbone(lab.pod(FROM), { ...toGuarded(lab), cred: await lab.mint(ID.client) }),
    401,
  );
  // Control: the rule is "only the waypoint", not "nobody" — the waypoint's identity is admitted.
  const control = await lab.hbone(lab.pod(FROM), { ...toGuarded(lab), cred: await lab.mint(ID.waypoint) });
  attempt.evidence.push(`control, the waypoint's own identity: status=${control.status ?? control.error}`);
  attempt.evidence.push(
    'waypoint not merged yet: tested against the ztunnel-side rule (workload has a waypoint GatewayRef)',
  );
  return control.status === 200
    ? attempt
    : combine(attempt, {
        observed: 'error',
        evidence: ['control did not get through: the test proves nothing'],
      });
}

/** Adds where the packets came from to each attempt's evidence. */
function noted(attempts: Attempt[]): Attempt[] {
  return attempts.map((a) => ({
    ...a,
    run: async (lab: BypassLab) => {
      const o = await a.run(lab);
      return { ...o, evidence: [...o.evidence, FROM_OUTSIDER] };
    },
  }));
}
