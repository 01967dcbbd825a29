// The dashboard page (`zmesh dashboard`): plain DOM and SVG, bundled by scripts/bundle.mjs
// into packages/harness/dist/dashboard/app.js. It follows /api/events (SSE; a snapshot a
// second) and toggles a namespace's L7 through /api/ns-l7, showing the control plane's answer.

const SVG = 'http://www.w3.org/2000/svg';
const app = document.getElementById('app');
let lastResult = '';
/** The previous snapshot's request counts per L7 edge and its time, for request rates. */
let previous = { at: 0, requests: new Map() };

const style = document.createElement('style');
style.textContent = `
body{font:14px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:16px 0 6px}
table{border-collapse:collapse;background:#fff} td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
.ok{color:#177a2c;font-weight:600}.bad{color:#b3261e;font-weight:600}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:16px}
#l7-result{white-space:pre-wrap;background:#fff;border:1px solid #ddd;padding:6px;min-height:1.5em}
svg{background:#fff;border:1px solid #ddd}`;
document.head.append(style);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  e.append(...children.filter((c) => c !== undefined));
  return e;
}

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function table(head, rows) {
  return el(
    'table',
    {},
    el('tr', {}, ...head.map((h) => el('th', {}, h))),
    ...rows.map((r) => el('tr', {}, ...r.map((c) => el('td', {}, c)))),
  );
}

function yes(b, good = 'yes', bad = 'no') {
  return el('span', { class: b ? 'ok' : 'bad' }, b ? good : bad);
}

function bytes(n) {
  if (n >= 1048576) return `${(n / 1048576).toFixed(1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${n} B`;
}

/** Workloads on a circle, one edge per tunnel (source → destination), labelled with bytes. */
function graph(view) {
  const names = new Set(view.workloads.map((w) => `${w.namespace}/${w.name}`));
  for (const t of view.tunnels) names.add(t.source).add(t.destination);
  const nodes = [...names].sort();
  const W = 640;
  const H = 360;
  const at = new Map(
    nodes.map((n, i) => {
      const a = (2 * Math.PI * i) / Math.max(nodes.length, 1) - Math.PI / 2;
      return [n, { x: W / 2 + 130 * Math.cos(a) * 1.6, y: H / 2 + 130 * Math.sin(a) }];
    }),
  );
  const s = svg('svg', { id: 'graph', width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  const defs = svg('defs');
  const marker = svg('marker', {
    id: 'arrow',
    viewBox: '0 0 10 10',
    refX: 22,
    refY: 5,
    markerWidth: 8,
    markerHeight: 8,
    orient: 'auto',
  });
  marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#3367d6' }));
  defs.append(marker);
  s.append(defs);
  const now = Date.parse(view.at);
  const requests = new Map();
  for (const t of view.tunnels) {
    const a = at.get(t.source);
    const b = at.get(t.destination);
    const l7 = t.via !== undefined;
    const g = svg('g', {
      class: l7 ? 'tunnel via-waypoint' : 'tunnel',
      'data-source': t.source,
      'data-destination': t.destination,
    });
    // An L7 edge bends (a quadratic curve) so that it does not hide the L4 tunnel it rides in.
    const mx = (a.x + b.x) / 2 + (l7 ? (b.y - a.y) * 0.25 : 0);
    const my = (a.y + b.y) / 2 - (l7 ? (b.x - a.x) * 0.25 : 0);
    let label = `${t.opened} conns (${t.open} open) · ${bytes(t.sentBytes)} ↑ ${bytes(t.receivedBytes)} ↓`;
    if (l7) {
      const key = `${t.source}>${t.destination}>${t.via}`;
      requests.set(key, t.requests);
      const before = previous.requests.get(key);
      const rate =
        before === undefined || now <= previous.at ? 0 : ((t.requests - before) * 1000) / (now - previous.at);
      label = `${t.requests} requests via ${t.via} · ${rate.toFixed(1)}/s`;
    }
    g.append(
      svg('path', {
        d: `M${a.x},${a.y} Q${mx},${my} ${b.x},${b.y}`,
        fill: 'none',
        stroke: l7 ? '#e37400' : t.open > 0 ? '#3367d6' : '#9ab',
        'stroke-width': t.open > 0 || l7 ? 3 : 1.5,
        'stroke-dasharray': l7 ? '6 4' : 'none',
        'marker-end': 'url(#arrow)',
      }),
      svg(
        'text',
        {
          x: (a.x + 2 * mx + b.x) / 4,
          y: (a.y + 2 * my + b.y) / 4 - 6,
          'text-anchor': 'middle',
          'font-size': 11,
          fill: '#333',
        },
        label,
      ),
    );
    s.append(g);
  }
  previous = { at: now, requests };
  for (const n of nodes) {
    const p = at.get(n);
    const g = svg('g', { class: 'workload', 'data-name': n });
    g.append(
      svg('circle', { cx: p.x, cy: p.y, r: 14, fill: '#e8f0fe', stroke: '#3367d6' }),
      svg('text', { x: p.x, y: p.y + 28, 'text-anchor': 'middle', 'font-size': 12 }, n),
    );
    s.append(g);
  }
  return s;
}

async function toggle(namespace, on) {
  const out = document.getElementById('l7-result');
  out.textContent = `L7 ${on ? 'on' : 'off'} for ${namespace}…`;
  const res = await fetch(
    `/api/ns-l7?namespace=${encodeURIComponent(namespace)}&state=${on ? 'on' : 'off'}`,
    {
      method: 'POST',
    },
  );
  const r = await res.json();
  const b = r.body ?? {};
  if (r.ok)
    lastResult = `namespace ${namespace}: L7 ${on ? 'on' : 'off'} (version ${b.version}), ACKed by ${(b.acked ?? []).length} proxies`;
  else if (r.status === 504)
    lastResult = `namespace ${namespace}: TIMED OUT waiting for ${(b.notAcked ?? []).map((p) => p.proxy).join(', ')}`;
  else
    lastResult = `REFUSED L7 ${on ? 'on' : 'off'} for ${namespace} (${b.code ?? `HTTP ${r.status}`}):\n${(b.reasons ?? [b.error]).join('\n')}`;
  out.textContent = lastResult;
}

function render(view) {
  const cp = view.controlPlane;
  app.replaceChildren(
    el('h1', {}, 'zmesh dashboard'),
    el(
      'div',
      {},
      'control plane: ',
      yes(cp.reachable, 'reachable', `unreachable: ${cp.error ?? ''}`),
      cp.reachable ? ` · generation ${cp.generation} · ${cp.objects} objects` : '',
      ` · updated ${view.at}`,
    ),
    el('h2', {}, 'Tunnels'),
    graph(view),
    el(
      'div',
      { class: 'grid' },
      el(
        'div',
        {},
        el('h2', {}, 'Nodes and ztunnels'),
        table(
          ['node', 'address', 'ready', 'connected', 'last contact', 'snapshot', 'certs expire in'],
          view.ztunnels.map((z) => [
            z.node ?? '?',
            z.address,
            z.reachable
              ? yes(z.ready, 'ready', `not ready: ${z.reasons.join('; ')}`)
              : yes(false, '', 'unreachable'),
            yes(z.connected),
            z.lastContactSecondsAgo === undefined ? '-' : `${z.lastContactSecondsAgo}s ago`,
            z.version === undefined ? '-' : JSON.stringify(z.version),
            z.certHorizonSeconds === undefined ? '-' : `${Math.round(z.certHorizonSeconds)}s`,
          ]),
        ),
        el('h2', {}, 'Namespaces'),
        table(
          ['namespace', 'L7', ''],
          view.namespaces.map((n) => [
            n.name,
            n.l7 ? yes(true, `on (${n.waypoint})`) : 'off',
            el(
              'button',
              { 'data-ns': n.name, onclick: () => toggle(n.name, !n.l7) },
              n.l7 ? 'L7 off' : 'L7 on',
            ),
          ]),
        ),
        el('h2', {}, 'Last L7 change'),
        el('div', { id: 'l7-result' }, lastResult),
      ),
      el(
        'div',
        {},
        el('h2', {}, 'Workloads'),
        table(
          ['workload', 'node', 'identity'],
          view.workloads.map((w) => [`${w.namespace}/${w.name}`, w.node, w.identity]),
        ),
        el('h2', {}, 'Fairness per tenant'),
        view.tenants.length === 0
          ? el('div', {}, 'no tenant work yet')
          : table(
              ['ztunnel', 'scheduler', 'tenant', 'queued', 'admitted', 'refused', 'mean delay'],
              view.tenants.map((t) => [
                t.ztunnel,
                t.scheduler,
                t.tenant,
                String(t.queueDepth),
                String(t.admitted),
                t.refused > 0 ? yes(false, '', String(t.refused)) : '0',
                `${(t.meanDelaySeconds * 1000).toFixed(2)} ms`,
              ]),
            ),
        el('h2', {}, 'Policy denials'),
        view.denials.length === 0
          ? el('div', {}, 'none')
          : table(
              ['ztunnel', 'reason', 'count'],
              view.denials.map((d) => [d.ztunnel, d.reason, String(d.count)]),
            ),
      ),
    ),
  );
}

const events = new EventSource('/api/events');
events.onmessage = (e) => render(JSON.parse(e.data));
