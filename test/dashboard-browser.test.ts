import { existsSync } from 'node:fs';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import * as http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startL7Lab } from '@zmesh/harness';
import test from 'ava';
import { execa } from 'execa';
import { type BrowserContext, chromium } from 'playwright-core';

/**
 * `zmesh dashboard` in a real browser: Debian's chromium (installed here when missing and we
 * are root), driven by playwright-core, against the L7 lab (control plane, two ztunnels, a
 * waypoint on loopback). The page must draw the frontend's tunnel, and the L7 toggle must show
 * the control plane's refusal (namespace `front` has no waypoint) and its ACK (`shop`).
 */
const CHROMIUM = '/usr/bin/chromium';
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const OUT = join(ROOT, 'out', 'test', 'dashboard');
const LAB = { block: '127.61', xdsPort: 25_960 };
const LISTEN = '127.61.0.9:15300';

async function browserUnavailable(): Promise<string | undefined> {
  if (existsSync(CHROMIUM)) return undefined;
  if (process.getuid?.() !== 0) return `${CHROMIUM} missing and not root to apt-get install chromium`;
  if (!existsSync('/usr/bin/apt-get')) return `${CHROMIUM} missing and no apt-get`;
  const r = await execa('apt-get', ['install', '-y', 'chromium'], {
    reject: false,
    env: { DEBIAN_FRONTEND: 'noninteractive' },
  });
  return existsSync(CHROMIUM) ? undefined : `apt-get install chromium failed (exit ${r.exitCode})`;
}

const unavailable = await browserUnavailable();
if (unavailable) test.skip(`dashboard browser test skipped: ${unavailable}`, () => {});

function get(host: string, port: number, path: string) {
  return new Promise<number>((resolve, reject) => {
    http
      .get({ host, port, path, agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      })
      .on('error', reject);
  });
}

(unavailable ? test.serial.skip : test.serial)(
  'the dashboard draws the tunnel and shows L7 refusals and ACKs',
  async (t) => {
    t.timeout(40_000);
    await mkdir(OUT, { recursive: true });
    const lab = await startL7Lab(LAB);
    const profile = join(tmpdir(), `zmesh-dashboard-chromium-${process.pid}`);
    const dashboard = execa(
      join(ROOT, 'bin', 'zmesh'),
      [
        'dashboard',
        '--listen',
        LISTEN,
        '--admin',
        lab.admin.admin,
        '--ztunnel',
        '127.61.0.2',
        '--ztunnel',
        '127.61.0.3',
        '--waypoint',
        lab.waypointAddress,
      ],
      { reject: false },
    );
    let browser: BrowserContext | undefined;
    try {
      // A fresh --user-data-dir: playwright passes the profile directory itself.
      browser = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        headless: true,
        args: [
          '--headless',
          '--no-sandbox',
          '--disable-gpu',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
          '--no-first-run',
        ],
      });
      for (let i = 0; i < 10; i++) t.is(await get(lab.entry.host, lab.entry.port, `/hello/${i}`), 200);
      const page = await browser.newPage();
      await page.setViewportSize({ width: 1400, height: 1000 });
      const url = `http://${LISTEN}/`;
      for (let i = 0; ; i++) {
        const ok = await page.goto(url).then(
          (r) => r?.ok(),
          () => false,
        );
        if (ok) break;
        if (i > 50) throw new Error(`dashboard never answered at ${url}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      // The frontend's tunnel (source ztunnel's istio_tcp_* counters) as an edge of the graph.
      const edge = page.locator('#graph g.tunnel[data-source="front/frontend"]').first();
      await edge.waitFor({ timeout: 10_000 });
      t.regex((await edge.textContent()) ?? '', /\d+ conns .*KiB|\d+ conns .* B/);
      t.regex((await page.locator('body').textContent()) ?? '', /spiffe:\/\/[^ ]*\/ns\/front\/sa\/frontend/);

      // `front` has no waypoint Gateway: the control plane refuses, and the page says why.
      await page.locator('button[data-ns="front"]').click();
      await page.locator('#l7-result', { hasText: 'REFUSED' }).waitFor({ timeout: 10_000 });
      t.log(await page.locator('#l7-result').textContent());

      // `shop` has one: the change is ACKed by every proxy, the namespace row follows, and the
      // frontend's next requests show as an L7 edge that the waypoint carried.
      t.is(await page.locator('button[data-ns="shop"]').textContent(), 'L7 on');
      await page.locator('button[data-ns="shop"]').click();
      await page.locator('#l7-result', { hasText: 'ACKed by' }).waitFor({ timeout: 10_000 });
      const result = (await page.locator('#l7-result').textContent()) ?? '';
      t.log(result);
      t.regex(result, /namespace shop: L7 on/);
      await page.locator('button[data-ns="shop"]', { hasText: 'L7 off' }).waitFor({ timeout: 5_000 });
      for (let i = 0; i < 5; i++) t.is(await get(lab.entry.host, lab.entry.port, `/again/${i}`), 200);
      const viaWaypoint = page.locator('#graph g.via-waypoint[data-source="front/frontend"]');
      await viaWaypoint.first().waitFor({ timeout: 10_000 });
      t.regex((await viaWaypoint.first().textContent()) ?? '', /\d+ requests via /);

      await page.screenshot({ path: join(OUT, 'dashboard.png'), fullPage: true });
      // The README's copy is refreshed on request only, so that a test run leaves the tree clean.
      const docs = join(ROOT, 'docs', 'dashboard.png');
      if (process.env.UPDATE_SCREENSHOTS === '1' || !existsSync(docs))
        await copyFile(join(OUT, 'dashboard.png'), docs);
    } finally {
      await browser?.close().catch(() => undefined);
      dashboard.kill('SIGTERM');
      const exited = await dashboard;
      await lab.stop();
      await rm(profile, { recursive: true, force: true });
      if (exited.exitCode !== 0) t.log(`zmesh dashboard exited ${exited.exitCode}: ${exited.stderr}`);
    }
  },
);
