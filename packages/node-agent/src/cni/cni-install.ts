import { copyFileSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { logger } from '@zmesh/shared';

const log = logger('cni-install');

/** The plugin's `type`: the name of its executable in the CNI bin directory. */
const CNI_TYPE = 'zmesh-cni';

export interface CniInstall {
  binDir: string;
  confDir: string;
  /** The plugin script (dist/cni/zmesh-cni.js). */
  pluginJs: string;
  /** The Node that runs it on the host. */
  node: string;
  agentSocket: string;
}

/** Writes a file by rename, so that a runtime reading it never sees half of it. */
function writeAtomic(path: string, text: string, mode: number): void {
  const tmp = `${path}.zmesh-tmp`;
  writeFileSync(tmp, text, { mode });
  renameSync(tmp, path);
}

/**
 * Puts the plugin in the CNI bin directory (the script and a wrapper named `zmesh-cni` that
 * runs it with `node`), and chains it at the end of the node's primary CNI config: the first
 * `.conflist`/`.conf`/`.json` in the conf directory by name, as the runtime picks it. A
 * single-plugin `.conf` becomes a `.conflist`. Idempotent: run again (every rescan), it
 * puts back an entry the primary CNI rewrote away. Returns the config file chained, or
 * undefined while the node has no CNI config yet.
 */
export function installCni(o: CniInstall): string | undefined {
  const script = join(o.binDir, `${CNI_TYPE}.js`);
  const wrapper = `#!/bin/sh\n# zmesh's CNI plugin (written by zmesh node-agent).\nexec '${o.node}' '${script}' "$@"\n`;
  copyFileSync(o.pluginJs, `${script}.zmesh-tmp`);
  renameSync(`${script}.zmesh-tmp`, script);
  let current = '';
  try {
    current = readFileSync(join(o.binDir, CNI_TYPE), 'utf8');
  } catch {
    // Not there yet.
  }
  if (current !== wrapper) writeAtomic(join(o.binDir, CNI_TYPE), wrapper, 0o755);
  const primary = readdirSync(o.confDir)
    .filter((f) => ['.conflist', '.conf', '.json'].includes(extname(f)))
    .sort()[0];
  if (!primary) return undefined;
  const path = join(o.confDir, primary);
  const text = readFileSync(path, 'utf8');
  const conf = JSON.parse(text) as Record<string, unknown> & { plugins?: Array<Record<string, unknown>> };
  const entry = { type: CNI_TYPE, agent_socket: o.agentSocket };
  if (Array.isArray(conf.plugins)) {
    const plugins = conf.plugins.filter((p) => p.type !== CNI_TYPE);
    const next = `${JSON.stringify({ ...conf, plugins: [...plugins, entry] }, null, 2)}\n`;
    if (next !== text) {
      writeAtomic(path, next, 0o644);
      log.info({ config: path }, 'chained zmesh-cni into the CNI config');
    }
    return path;
  }
  // A single plugin's config: the same network as a list, zmesh-cni after it.
  const { cniVersion, name, ...plugin } = conf;
  const list = join(o.confDir, `${primary.slice(0, -extname(primary).length)}.conflist`);
  writeAtomic(list, `${JSON.stringify({ cniVersion, name, plugins: [plugin, entry] }, null, 2)}\n`, 0o644);
  rmSync(path);
  log.info({ config: list, from: path }, 'chained zmesh-cni into the CNI config');
  return list;
}
