import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as tls from 'node:tls';
import {
  CertificateAuthority,
  clientTlsOptions,
  H2ErrorCode,
  HpackEncoder,
  h2wire,
  TrustBundle,
} from '@zmesh/shared';

/**
 * Hostile HBONE peers that hold a valid mesh certificate: what a compromised workload can
 * do once TLS is behind it. Each speaks raw HTTP/2 frames (the production encoders, no
 * client state machine) to a ztunnel's 15008. Issue 38, docs/hardening.md.
 */

export interface MeshPeerTarget {
  host: string;
  port: number;
  /** The CONNECT authority the floods and slow readers ask for. */
  authority: string;
  tls: tls.ConnectionOptions;
}

/**
 * TLS options for a peer with identity `client`, its certificate issued by the control
 * plane's own CA (`caDir` holds root-cert.pem and root-key.pem), expecting `server`.
 */
export async function meshPeerTls(
  caDir: string,
  trustDomain: string,
  client: string,
  server: string,
): Promise<tls.ConnectionOptions> {
  const [certPem, keyPem] = await Promise.all([
    readFile(join(caDir, 'root-cert.pem'), 'utf8'),
    readFile(join(caDir, 'root-key.pem'), 'utf8'),
  ]);
  const ca = await CertificateAuthority.fromPem({ trustDomain, certPem, keyPem });
  const cred = await ca.issue(client, 3600);
  return clientTlsOptions(cred, new TrustBundle(trustDomain, [certPem]), [server]);
}

const { frame, FrameType, Flag } = h2wire;
const EMPTY_SETTINGS = frame(FrameType.SETTINGS, 0, 0);
const PING = h2wire.pingFrame(Buffer.alloc(8), false);

function connectBlock(authority: string): Buffer {
  return new HpackEncoder().encode([
    [':method', 'CONNECT'],
    [':authority', authority],
  ]);
}

/** A TLS connection that has sent the preface and an empty SETTINGS. */
function open(target: MeshPeerTarget): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ ...target.tls, host: target.host, port: target.port });
    s.once('error', reject);
    s.once('secureConnect', () => {
      s.removeListener('error', reject);
      s.on('error', () => {});
      s.write(Buffer.concat([h2wire.PREFACE, EMPTY_SETTINGS]));
      resolve(s);
    });
  });
}

/**
 * Writes `flood`, reads frames and resolves with the code of the GOAWAY the server sends
 * (undefined if the connection ends without one, or nothing comes within `timeoutMs`).
 */
async function floodUntilGoaway(
  target: MeshPeerTarget,
  flood: Buffer,
  timeoutMs = 5000,
): Promise<number | undefined> {
  const s = await open(target);
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const done = (code: number | undefined) => {
      clearTimeout(timer);
      s.destroy();
      resolve(code);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    s.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 9) {
        const length = buf.readUIntBE(0, 3);
        if (buf.length < 9 + length) break;
        if (buf[3] === FrameType.GOAWAY && length >= 8) return done(buf.readUInt32BE(13));
        buf = buf.subarray(9 + length);
      }
    });
    s.once('close', () => done(undefined));
    s.write(flood);
  });
}

export type FloodKind = 'rapidReset' | 'continuation' | 'settings';

/**
 * One flood on a fresh connection; true when the server answered it with GOAWAY
 * ENHANCE_YOUR_CALM (the flood limits of docs/hardening.md):
 * - `rapidReset`: 2,000 CONNECT streams each reset at once with RST_STREAM(NO_ERROR);
 * - `continuation`: a CONNECT HEADERS without END_HEADERS, then 10,000 empty CONTINUATIONs;
 * - `settings`: 20,000 SETTINGS frames, none of the ACKs read.
 */
export async function meshFlood(target: MeshPeerTarget, kind: FloodKind): Promise<boolean> {
  if (kind === 'settings') return settingsFlood(target);
  const block = connectBlock(target.authority);
  const parts: Buffer[] = [];
  if (kind === 'rapidReset') {
    for (let i = 0; i < 2000; i++) {
      const id = 2 * i + 1;
      parts.push(frame(FrameType.HEADERS, Flag.END_HEADERS, id, block));
      parts.push(h2wire.rstStreamFrame(id, H2ErrorCode.NO_ERROR));
    }
  } else {
    parts.push(frame(FrameType.HEADERS, 0, 1, block));
    const empty = frame(FrameType.CONTINUATION, 0, 1);
    for (let i = 0; i < 10_000; i++) parts.push(empty);
  }
  return (await floodUntilGoaway(target, Buffer.concat(parts))) === H2ErrorCode.ENHANCE_YOUR_CALM;
}

/**
 * SETTINGS without reading the ACKs: the server may queue a bounded backlog of answers and
 * then ends the connection (its control-frame bound), or the kernel's buffers absorb them
 * all; either way it must stay bounded. Resolves once the server closed or 3 s passed;
 * true when it closed.
 */
function settingsFlood(target: MeshPeerTarget): Promise<boolean> {
  return open(target).then(
    (s) =>
      new Promise((resolve) => {
        const flood = Buffer.concat(Array.from({ length: 20_000 }, () => EMPTY_SETTINGS));
        s.pause();
        // Paused, the socket reports no close: a write after the server closed fails.
        const probe = setInterval(() => s.write(EMPTY_SETTINGS), 200);
        const done = (closed: boolean) => {
          clearInterval(probe);
          clearTimeout(timer);
          s.destroy();
          resolve(closed);
        };
        const timer = setTimeout(() => done(false), 3000);
        s.once('error', () => done(true));
        s.write(flood);
      }),
  );
}

/**
 * A slow reader: a CONNECT tunnel whose client asks for every byte HTTP/2 allows (windows of
 * 2^31−1), sends `request` and then never reads. Resolves with the milliseconds until the
 * server closed it (its PING deadline), 'held' if it was still open after `giveUpMs`, or
 * 'stopped' if `stopping()` became true first.
 */
export async function slowReader(
  target: MeshPeerTarget,
  request: Buffer,
  giveUpMs: number,
  stopping: () => boolean,
): Promise<number | 'held' | 'stopped'> {
  const s = await open(target);
  const started = performance.now();
  const max = h2wire.MAX_WINDOW_BYTES;
  s.write(
    Buffer.concat([
      h2wire.settingsFrame(new Map([[h2wire.Setting.INITIAL_WINDOW_SIZE, max]])),
      h2wire.windowUpdateFrame(0, max - h2wire.DEFAULT_WINDOW_BYTES),
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, connectBlock(target.authority)),
      frame(FrameType.DATA, 0, 1, request),
    ]),
  );
  s.pause();
  return new Promise((resolve) => {
    const done = (result: number | 'held' | 'stopped') => {
      clearInterval(probe);
      s.destroy();
      resolve(result);
    };
    // Paused, the socket reports no close: a write (a PING) after the server closed fails.
    const probe = setInterval(() => {
      if (stopping()) done('stopped');
      else if (performance.now() - started > giveUpMs) done('held');
      else s.write(PING);
    }, 250);
    s.once('error', () => done(performance.now() - started));
  });
}
