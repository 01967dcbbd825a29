import { type ParsedIp, parseIp } from '@zmesh/shared';

/**
 * Istio's `remote.ip` (and `remoteIpBlocks`): the original client as X-Forwarded-For names it
 * past `numTrustedProxies` hops (ProxyConfig `gatewayTopology.numTrustedProxies`, Envoy's
 * `xff_num_trusted_hops` with `use_remote_address`).
 *
 * - 0 hops trusted (the default): the downstream peer, whatever the header says: a client
 *   cannot choose its own remote.ip.
 * - N hops: the Nth address from the right of the header as received (before this hop
 *   appends its own), the proxies in front each having appended the one before them.
 * - Fewer than N entries, or that entry not an IP address: the downstream peer, as Envoy
 *   falls back.
 *
 * Several header lines count as one list, joined by commas (RFC 9110 §5.3), as Envoy does.
 */
export function remoteAddress(
  xff: string | undefined,
  trustedHops: number,
  peer: ParsedIp | undefined,
): ParsedIp | undefined {
  if (trustedHops <= 0 || xff === undefined) return peer;
  let end = xff.length;
  for (let skipped = 0; skipped < trustedHops - 1; skipped++) {
    end = xff.lastIndexOf(',', end - 1);
    if (end <= 0) return peer;
  }
  const entry = xff.slice(xff.lastIndexOf(',', end - 1) + 1, end).trim();
  return parseIp(entry) ?? peer;
}

/** A `--num-trusted-proxies` value the CLI has checked, as a Waypoint option (0: none). */
export function trustedProxiesOf(value: string | number | undefined): { numTrustedProxies?: number } {
  const n = Number(value ?? 0);
  return n > 0 ? { numTrustedProxies: n } : {};
}
