import { type AdminTarget, readAdminToken } from '@zmesh/shared/cli';

export interface DashboardCommandOptions {
  listen: string;
  admin: string;
  adminTokenFile?: string;
  ztunnel: string[];
  waypoint: string[];
}

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\])$/;

/** `zmesh dashboard`: serves until SIGINT/SIGTERM; a bad flag is one line and exit 2. */
export async function runDashboard(o: DashboardCommandOptions): Promise<number> {
  const m = /^(.*):(\d{1,5})$/.exec(o.listen);
  const host = m?.[1] ?? '';
  const port = Number(m?.[2]);
  if (!m || !LOOPBACK.test(host) || port > 65535) {
    console.error(
      `zmesh dashboard: --listen must be a loopback HOST:PORT (127.0.0.1:15300), got ${o.listen}`,
    );
    return 2;
  }
  const bad = [...o.ztunnel, ...o.waypoint].find((z) => !/^[\w.:-]+$/.test(z) || z.includes('/'));
  if (bad !== undefined) {
    console.error(`zmesh dashboard: --ztunnel and --waypoint take a proxy's address (its host), got ${bad}`);
    return 2;
  }
  let admin: AdminTarget = { admin: o.admin };
  try {
    if (o.adminTokenFile) admin = { admin: o.admin, token: await readAdminToken(o.adminTokenFile) };
    // The server (and what it loads) only for flags that passed.
    const { startDashboard } = await import('../dashboard/dashboard-server.js');
    const d = await startDashboard({
      host: host.replace(/^\[|\]$/g, ''),
      port,
      admin,
      ztunnels: o.ztunnel,
      waypoints: o.waypoint,
    });
    console.log(
      `zmesh dashboard: ${d.url} (control plane ${o.admin}, ${o.ztunnel.length || 'its'} ztunnels, ${o.waypoint.length} waypoints)`,
    );
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await d.close();
    return 0;
  } catch (e) {
    const code = (e as { code?: string }).code;
    console.error(`zmesh dashboard: ${code ? `${code}: ` : ''}${(e as Error).message}`);
    return 1;
  }
}
