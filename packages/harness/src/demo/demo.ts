import { BpfCapture } from '@zmesh/ztunnel';

/**
 * `make demo`: the real mesh (network namespaces, BPF capture) when this machine allows
 * it, otherwise explicit-proxy mode on loopback, saying why.
 */
export async function runDemo(): Promise<number> {
  const reason = await BpfCapture.unavailableReason();
  if (reason === undefined) {
    const { runClusterDemo } = await import('./cluster-demo.js');
    return runClusterDemo();
  }
  console.log(`capture mode unavailable (${reason}): falling back to explicit-proxy mode on loopback`);
  const { runExplicitDemo } = await import('./explicit-demo.js');
  return runExplicitDemo();
}
