import { BpfCapture } from '@zmesh/ztunnel';

/**
 * `make demo`: part 1 is the real mesh (network namespaces, BPF capture) when this machine
 * allows it, otherwise explicit-proxy mode on loopback, saying why; part 2 turns L7 on and
 * off for a namespace, live, through a control plane and a waypoint.
 */
export async function runDemo(): Promise<number> {
  const reason = await BpfCapture.unavailableReason();
  let status: number;
  if (reason === undefined) {
    const { runClusterDemo } = await import('./cluster-demo.js');
    status = await runClusterDemo();
  } else {
    console.log(`capture mode unavailable (${reason}): falling back to explicit-proxy mode on loopback`);
    const { runExplicitDemo } = await import('./explicit-demo.js');
    status = await runExplicitDemo();
  }
  console.log('\n════ part 2: L7 for one namespace, on and off live (control plane, xDS, waypoint) ════');
  const { runL7Demo } = await import('./l7-demo.js');
  const l7 = await runL7Demo();
  return status || l7;
}
