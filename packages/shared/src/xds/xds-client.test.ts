import { once } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import test from 'ava';
import fc from 'fast-check';
import { Registry } from 'prom-client';
import {
  ADS_METHOD,
  type DeltaRequest,
  type DeltaResponse,
  deltaRequestCodec,
  deltaResponseCodec,
} from './ads-messages.js';
import { decodeAddress, decodeAuthorization } from './codec.js';
import { backoffDelay, type NackEvent, XdsClient } from './xds-client.js';

test('backoff grows exponentially, is jittered within [base/2, base] and capped at maxMs', (t) => {
  const b = { initialMs: 100, maxMs: 5000 };
  t.is(
    backoffDelay(0, b, () => 0),
    50,
  );
  t.is(
    backoffDelay(0, b, () => 1),
    100,
  );
  t.is(
    backoffDelay(3, b, () => 0),
    400,
  );
  t.is(
    backoffDelay(10, b, () => 1),
    5000,
  );
  t.is(
    backoffDelay(10_000, b, () => 0),
    2500,
  );
});

test('decoding arbitrary bytes never throws: it returns a value or reasons', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
      const a = decodeAddress(bytes);
      const p = decodeAuthorization(bytes);
      return (a.ok || a.error.length > 0) && (p.ok || p.error.length > 0);
    }),
    { numRuns: 2000 },
  );
  t.pass();
});

const THING_TYPE = 'type.googleapis.com/test.Thing';

/** A one-type ADS server driven by the test: it records each stream's requests and answers with `script`. */
async function fakeAds(
  script: (call: AdsCall, req: DeltaRequest, stream: number) => void,
  /** Streams whose `authorization` this refuses end UNAUTHENTICATED, like the control plane's. */
  authorized: (authorization: string) => boolean = () => true,
) {
  const server = new grpc.Server();
  const streams: DeltaRequest[][] = [];
  server.addService(
    {
      ads: {
        path: ADS_METHOD,
        requestStream: true,
        responseStream: true,
        requestSerialize: deltaRequestCodec.serialize,
        requestDeserialize: deltaRequestCodec.deserialize,
        responseSerialize: deltaResponseCodec.serialize,
        responseDeserialize: deltaResponseCodec.deserialize,
      },
    },
    {
      ads: (call: AdsCall) => {
        if (!authorized(String(call.metadata.get('authorization')[0] ?? ''))) {
          call.emit('error', { code: grpc.status.UNAUTHENTICATED, details: 'missing or invalid node token' });
          return;
        }
        const requests: DeltaRequest[] = [];
        const stream = streams.push(requests) - 1;
        call.on('data', (req: DeltaRequest) => {
          requests.push(req);
          script(call, req, stream);
        });
        call.on('error', () => {});
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) =>
      e ? reject(e) : resolve(p),
    ),
  );
  return { port, streams, stop: () => server.forceShutdown() };
}
type AdsCall = grpc.ServerDuplexStream<DeltaRequest, DeltaResponse>;

function thing(version: string, text: string): DeltaResponse {
  return {
    typeUrl: THING_TYPE,
    nonce: `n-${version}`,
    resources: [
      { name: 'ns/gw', version, resource: { type_url: THING_TYPE, value: new TextEncoder().encode(text) } },
    ],
  };
}

test('an owner-applied, named subscription: its reasons are the NACK, its held version is resent on reconnect', async (t) => {
  const ads = await fakeAds((call, req, stream) => {
    if (req.resourceNamesSubscribe?.length) {
      // First stream: a good version, then a bad one, then the stream ends. Second: nothing new.
      if (stream === 0) call.write(thing('v1', 'good'));
      else call.write({ typeUrl: THING_TYPE, nonce: 'n-again', resources: [] });
    } else if (req.responseNonce === 'n-v1') call.write(thing('v2', 'bad'));
    else if (req.responseNonce === 'n-v2') call.end();
  });
  let held: { version: string; text: string } | undefined;
  const client = new XdsClient({
    address: `127.0.0.1:${ads.port}`,
    node: { id: 'waypoint~test' },
    token: 't',
    typeUrls: [],
    subscriptions: [
      {
        typeUrl: THING_TYPE,
        names: ['ns/gw'],
        versions: (): Record<string, string> => (held ? { 'ns/gw': held.version } : {}),
        apply: (resources) => {
          const r = resources[0];
          if (r === undefined) return [];
          const text = new TextDecoder().decode(r.bytes);
          if (text !== 'good') return [`${r.name}: not good`];
          held = { version: r.version, text };
          return [];
        },
      },
    ],
    credentials: grpc.credentials.createInsecure(),
    backoff: { initialMs: 10, maxMs: 20 },
  });
  t.teardown(async () => {
    await client.stop();
    ads.stop();
  });
  const nack = once(client, 'nack');
  const reconnected = new Promise<void>((resolve) => {
    client.on('synced', () => {
      if (ads.streams.length === 2) resolve();
    });
  });
  await client.start();
  const [event] = (await nack) as [NackEvent];
  t.deepEqual(event, { typeUrl: THING_TYPE, nonce: 'n-v2', reasons: ['ns/gw: not good'] });
  t.deepEqual(held, { version: 'v1', text: 'good' }, 'a refused version changes nothing');
  await reconnected;
  const [first, second] = ads.streams;
  t.is(first![0]!.node?.id, 'waypoint~test');
  t.deepEqual(first![0]!.resourceNamesSubscribe, ['ns/gw']);
  t.deepEqual(first![0]!.initialResourceVersions ?? {}, {});
  t.is(first![1]!.responseNonce, 'n-v1');
  t.is(first![1]!.errorDetail, undefined, 'the good version is ACKed');
  t.is(first![2]!.errorDetail?.message, 'ns/gw: not good');
  t.deepEqual(second![0]!.initialResourceVersions, { 'ns/gw': 'v1' });
  t.true(client.synced);
  t.is(client.snapshot().workloads.size, 0, 'owner-applied types never touch the snapshot');
});

test('an owner whose apply throws gets a NACK, not an exception in the event loop', async (t) => {
  const ads = await fakeAds((call, req) => {
    if (req.resourceNamesSubscribe?.length) call.write(thing('v1', 'x'));
  });
  const client = new XdsClient({
    address: `127.0.0.1:${ads.port}`,
    node: { id: 'n' },
    token: 't',
    typeUrls: [],
    subscriptions: [
      {
        typeUrl: THING_TYPE,
        versions: () => ({}),
        apply: () => {
          throw new Error('owner bug');
        },
      },
    ],
    credentials: grpc.credentials.createInsecure(),
    backoff: { initialMs: 10, maxMs: 20 },
  });
  t.teardown(async () => {
    await client.stop();
    ads.stop();
  });
  const nack = once(client, 'nack');
  await client.start();
  const [event] = (await nack) as [NackEvent];
  t.deepEqual(event.reasons, [`${THING_TYPE}: owner bug`]);
  t.deepEqual(ads.streams[0]![0]!.resourceNamesSubscribe, ['*'], 'no names: the wildcard');
});

test('several addresses: a dead control plane is skipped for the next; a refused token is re-read', async (t) => {
  const dead = await fakeAds(() => {});
  dead.stop();
  let good = 'old';
  const ads = await fakeAds(
    (call, req) => {
      if (req.resourceNamesSubscribe?.length) call.write(thing('v1', 'good'));
    },
    (authorization) => authorization === `Bearer ${good}`,
  );
  let token = 'stale';
  let refreshes = 0;
  const registry = new Registry();
  const client = new XdsClient({
    address: `127.0.0.1:${dead.port},127.0.0.1:${ads.port}`,
    node: { id: 'ztunnel~test' },
    token: () => token,
    refreshToken: async () => {
      refreshes++;
      token = good;
    },
    typeUrls: [],
    subscriptions: [{ typeUrl: THING_TYPE, names: ['ns/gw'], versions: () => ({}), apply: () => [] }],
    credentials: grpc.credentials.createInsecure(),
    backoff: { initialMs: 10, maxMs: 20 },
    registry,
  });
  t.teardown(async () => {
    await client.stop();
    ads.stop();
  });
  good = 'minted';
  const synced = once(client, 'synced');
  await client.start();
  await synced;
  t.true(client.synced);
  t.is(refreshes, 1, 'the token is re-read once, when refused');
  const ends = await registry.getSingleMetric('zmesh_xds_stream_ends_total')!.get();
  const byCode = Object.fromEntries(ends.values.map((v) => [v.labels.code, v.value]));
  t.true((byCode.UNAVAILABLE ?? 0) >= 1, JSON.stringify(byCode));
  t.is(byCode.UNAUTHENTICATED, 1);
});
