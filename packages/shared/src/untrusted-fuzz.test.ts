import test from 'ava';
import fc from 'fast-check';
import { generateCsr } from './identity/credential.js';
import { parseCsr } from './identity/csr.js';
import { readTlv } from './identity/der.js';
import { decodeAddress } from './xds/address-codec.js';
import { decodeAuthorization } from './xds/authorization-codec.js';
import { decodeAck, decodeHello, decodeRequest } from './zds/zds-messages.js';

/**
 * Property-based fuzzing of the other parsers a peer reaches (issue 38): CSRs at the CA,
 * xDS resources at a proxy, ZDS messages from the node agent. Each returns a value or an
 * error and never throws. Budget as in h2-fuzz.test.ts (ZMESH_FUZZ_RUNS, ZMESH_FUZZ_SEED).
 */
const RUNS = Number(process.env.ZMESH_FUZZ_RUNS ?? 300);
const params = { numRuns: RUNS, seed: Number(process.env.ZMESH_FUZZ_SEED ?? 38), endOnFailure: true };
const bytes = fc.uint8Array({ maxLength: 256 });
const { csrPem } = await generateCsr('spiffe://zmesh.test/ns/default/sa/fuzz');

function pem(der: Uint8Array): string {
  const b64 = Buffer.from(der)
    .toString('base64')
    .replace(/(.{64})/g, '$1\n');
  return `-----BEGIN CERTIFICATE REQUEST-----\n${b64}\n-----END CERTIFICATE REQUEST-----\n`;
}

test('parseCsr: a valid CSR mutated byte by byte, or random DER, is parsed or refused, never thrown', (t) => {
  t.true(parseCsr(csrPem).ok, 'the seed CSR parses');
  const der = Buffer.from(
    csrPem
      .split('\n')
      .filter((l) => !l.startsWith('-----'))
      .join(''),
    'base64',
  );
  fc.assert(
    fc.property(
      fc.array(fc.record({ at: fc.nat(der.length - 1), value: fc.integer({ min: 0, max: 255 }) }), {
        maxLength: 4,
      }),
      bytes,
      (mutations, random) => {
        const mutated = Buffer.from(der);
        for (const m of mutations) mutated[m.at] = m.value;
        return (
          typeof parseCsr(pem(mutated)).ok === 'boolean' && typeof parseCsr(pem(random)).ok === 'boolean'
        );
      },
    ),
    params,
  );
});

test('readTlv refuses non-minimal DER lengths', (t) => {
  t.throws(() => readTlv(Uint8Array.from([0x30, 0x81, 0x05, 1, 2, 3, 4, 5]), 0), { message: /non-minimal/ });
  t.throws(() => readTlv(Uint8Array.from([0x30, 0x82, 0x00, 0x81, ...new Array(0x81).fill(0)]), 0), {
    message: /non-minimal/,
  });
  t.is(readTlv(Uint8Array.from([0x04, 0x81, 0x80, ...new Array(0x80).fill(0)]), 0).end, 131);
  t.is(readTlv(Uint8Array.from([0x04, 0x02, 1, 2]), 0).end, 4);
});

test('xDS and ZDS decoders: any bytes decode or are refused, never thrown', (t) => {
  fc.assert(
    fc.property(bytes, (b) => {
      for (const decode of [decodeAddress, decodeAuthorization, decodeHello, decodeRequest, decodeAck]) {
        const r = decode(b) as { ok: unknown };
        if (typeof r.ok !== 'boolean') return false;
      }
      return true;
    }),
    params,
  );
  t.pass();
});
