/**
 * Programs the bypass harness runs inside pods (as `node -e` / `python3 -c`), so that
 * every attempt's packets come from the attacker pod's own uid, cgroup, PID and network
 * namespace. Each prints one JSON document on stdout.
 */

/**
 * The target application: TCP on [::]:port (dual stack) answers each connection with the
 * peer address it saw, then closes; UDP on the same port answers each datagram the same
 * way. It also prints every peer it sees (JSON lines), so the harness has the target's own
 * record beside the attacker's. ztunnel delivers from the client's own address (source
 * preserved), so the address alone does not tell: each TCP peer also carries the SO_MARK of
 * the accepted socket, which the kernel copies from the SYN (tcp_fwmark_accept). ztunnel's
 * connections carry 0x15008; a packet from outside the pod arrives with no mark (a veth
 * crossing clears it) and a pod cannot set one (no CAP_NET_ADMIN). argv[2] is koffi's path
 * (getsockopt); without it `mark` is null and every TCP peer outside the pod counts as a bypass.
 */
export const TARGET_SERVER = `
const port = Number(process.argv[1]);
const net = require('net'), dgram = require('dgram');
let markOf = () => null;
try {
  const koffi = require(process.argv[2]);
  const getsockopt = koffi.load('libc.so.6').func('int getsockopt(int fd, int level, int name, _Out_ void *val, _Inout_ uint32_t *len)');
  markOf = (s) => { const b = Buffer.alloc(4); return getsockopt(s._handle.fd, 1, 36, b, [4]) === 0 ? b.readUInt32LE(0) : null; };
} catch {}
const seen = (kind, peer, mark) => console.log(JSON.stringify({ [kind]: peer, ...(kind === 'tcp' ? { mark } : {}) }));
const udp = dgram.createSocket({ type: 'udp6', ipv6Only: false });
udp.on('message', (m, r) => { seen('udp', r.address); udp.send('udp:' + r.address, r.port, r.address); });
udp.bind(port, '::', () => {
  net.createServer((s) => { seen('tcp', String(s.remoteAddress), markOf(s)); s.on('error', () => {}); s.end(String(s.remoteAddress)); })
    .listen(port, '::', () => console.log(JSON.stringify({ listening: port })));
});
`;

/**
 * TCP (or UDP) probes, one after another. argv[1]: JSON
 * `{ timeoutMs, targets: [{ host, port, send?, udp?, unix? }] }`. Each result:
 * `{ target, connected, peer, answer, error, ms }`; `connected` is what connect() said,
 * which for a captured connection is the local ztunnel listener, not the target.
 */
export const PROBE = `
const net = require('net'), dgram = require('dgram');
const { timeoutMs, targets } = JSON.parse(process.argv[1]);
function tcp(t) {
  return new Promise((resolve) => {
    const started = Date.now();
    const out = { target: t.unix || t.host + ':' + t.port, connected: false, peer: null, answer: '', error: null };
    const s = t.unix ? net.connect(t.unix) : net.connect({ host: t.host, port: t.port });
    const timer = setTimeout(() => { out.error = out.error || 'TIMEOUT'; s.destroy(); }, timeoutMs);
    s.on('connect', () => {
      out.connected = true;
      if (!t.unix) out.peer = s.remoteAddress + ':' + s.remotePort;
      if (t.send) s.write(t.send);
    });
    s.on('data', (d) => { out.answer += d; });
    s.on('error', (e) => { out.error = out.error || e.code || e.message; });
    s.on('close', () => { clearTimeout(timer); out.ms = Date.now() - started; resolve(out); });
  });
}
function udp(t) {
  return new Promise((resolve) => {
    const out = { target: 'udp:' + t.host + ':' + t.port, answer: '', error: null };
    const s = dgram.createSocket(t.host.includes(':') ? 'udp6' : 'udp4');
    const done = () => { clearTimeout(timer); try { s.close(); } catch {} resolve(out); };
    const timer = setTimeout(() => { out.error = 'TIMEOUT'; done(); }, timeoutMs);
    s.on('message', (m) => { out.answer = String(m); done(); });
    s.on('error', (e) => { out.error = e.code || e.message; done(); });
    s.send('x', t.port, t.host);
  });
}
(async () => {
  const results = [];
  for (const t of targets) results.push(await (t.udp ? udp(t) : tcp(t)));
  console.log(JSON.stringify(results));
})();
`;

/**
 * An HBONE client an attacker would write: TLS (any certificate, or none) + HTTP/2
 * CONNECT with headers of its choosing. stdin: JSON
 * `{ host, port, key?, cert?, authority, headers, timeoutMs }`. Output: how far it got
 * (`tls`, `settings`, `response`), the status and x-zmesh-error of the answer, any GOAWAY,
 * and what the far end answered through the tunnel.
 */
export const HBONE_PROBE = `
const http2 = require('http2'), tls = require('tls');
let input = '';
process.stdin.on('data', (d) => { input += d; }).on('end', () => run(JSON.parse(input)));
function run(o) {
  const out = { stage: 'connect' };
  let done = false;
  const finish = (extra) => {
    if (done) return;
    done = true;
    Object.assign(out, extra);
    console.log(JSON.stringify(out));
    process.exit(0);
  };
  setTimeout(() => finish({ error: out.error || 'TIMEOUT' }), o.timeoutMs);
  const host = o.host.includes(':') ? '[' + o.host + ']' : o.host;
  const session = http2.connect('https://' + host + ':' + o.port, {
    createConnection: () => {
      const s = tls.connect({ host: o.host, port: o.port, ALPNProtocols: ['h2'], rejectUnauthorized: false,
        ...(o.key ? { key: o.key, cert: o.cert } : {}) });
      s.on('secureConnect', () => { out.stage = 'tls'; });
      s.on('error', (e) => { out.error = out.error || e.code || e.message; });
      return s;
    },
  });
  session.on('error', (e) => { out.error = out.error || e.code || e.message; });
  session.on('remoteSettings', () => { if (out.stage === 'tls') out.stage = 'settings'; });
  session.on('goaway', (code, last, data) => { out.goaway = { code, data: data ? data.toString('latin1') : '' }; });
  session.on('close', () => setTimeout(() => finish({ error: out.error || 'CLOSED' }), 50));
  const req = session.request({ ':method': 'CONNECT', ':authority': o.authority, ...o.headers }, { endStream: false });
  let answer = '';
  req.on('response', (h) => {
    out.stage = 'response';
    out.status = Number(h[':status']);
    out.zmeshError = h['x-zmesh-error'];
    if (out.status === 200) req.write('hello\\n');
  });
  req.on('data', (d) => { answer += d; });
  req.on('end', () => finish({ answer }));
  req.on('error', (e) => { out.error = out.error || e.code || e.message; });
  req.on('close', () => setTimeout(() => finish({ answer }), 50));
}
`;

/**
 * Privilege checks from inside a pod (python3: setsockopt, ptrace and pidfd need raw
 * syscalls). argv[1]: JSON list of checks; each returns `{ check, ok, errno, detail }`,
 * where `ok` means the kernel let the pod do it.
 */
export const PRIVILEGE_PROBE = `
import ctypes, errno, json, os, platform, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def res(check, ok, err=0, detail=''):
    return {'check': check, 'ok': ok, 'errno': errno.errorcode.get(err, str(err)) if err else None, 'detail': detail}
def sockopt(check, level, name):
    s = socket.socket()
    try:
        s.setsockopt(level, name, 1); return res(check, True)
    except OSError as e: return res(check, False, e.errno)
    finally: s.close()
def run(c):
    k = c['check']
    if k == 'so_mark': return sockopt(k, socket.SOL_SOCKET, 36)
    if k == 'ip_transparent': return sockopt(k, socket.SOL_IP, 19)
    if k == 'tcp_repair': return sockopt(k, socket.IPPROTO_TCP, 19)
    if k == 'userns_pod_socket':
        # A socket made in the pod's namespace, then a new user namespace: full capabilities
        # there, none over the pod's network namespace, which the socket still belongs to.
        s = socket.socket()
        if libc.unshare(0x10000000) != 0: return res(k, False, ctypes.get_errno(), 'unshare(CLONE_NEWUSER)')
        out = []
        for name, level, opt in (('SO_MARK', socket.SOL_SOCKET, 36), ('IP_TRANSPARENT', socket.SOL_IP, 19), ('TCP_REPAIR', socket.IPPROTO_TCP, 19)):
            try: s.setsockopt(level, opt, 1); out.append(name + ' ALLOWED')
            except OSError as e: out.append(name + ' ' + errno.errorcode.get(e.errno, str(e.errno)))
        return res(k, any(o.endswith('ALLOWED') for o in out), 0, 'in a new user namespace: ' + ', '.join(out))
    if k == 'raw_socket':
        try: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP).close(); return res(k, True)
        except OSError as e: return res(k, False, e.errno)
    if k == 'bind_other':
        s = socket.socket()
        try: s.bind((c['ip'], 0)); return res(k, True, 0, 'bound ' + c['ip'])
        except OSError as e: return res(k, False, e.errno)
        finally: s.close()
    if k == 'freebind_connect':
        v6 = ':' in c['ip']
        s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET); s.settimeout(c['timeout'])
        try:
            s.setsockopt(socket.IPPROTO_IPV6, 78, 1) if v6 else s.setsockopt(socket.SOL_IP, 15, 1)
            s.bind((c['ip'], 0))
            s.connect((c['host'], c['port'])); data = s.recv(200)
            return res(k, len(data) > 0, 0, 'answer: ' + data.decode(errors='replace'))
        except socket.timeout: return res(k, False, errno.ETIMEDOUT, 'timeout')
        except OSError as e: return res(k, False, e.errno)
        finally: s.close()
    if k == 'addr_add':
        p = subprocess.run(['ip', 'addr', 'add', c['cidr'], 'dev', c['dev']], capture_output=True, text=True)
        return res(k, p.returncode == 0, 0, (p.stderr or p.stdout).strip())
    if k == 'cgroup_move':
        try:
            with open(c['path'] + '/cgroup.procs', 'w') as f: f.write(str(os.getpid()))
            return res(k, True, 0, c['path'])
        except OSError as e: return res(k, False, e.errno, c['path'])
    if k == 'own_cgroup':
        lines = [l for l in open('/proc/self/cgroup').read().splitlines() if l.startswith('0::')]
        return res(k, True, 0, 'cgroup v2 ' + ' '.join(lines))
    if k == 'ptrace':
        r = libc.ptrace(16, c['pid'], None, None)
        return res(k, r == 0, ctypes.get_errno() if r != 0 else 0, 'pid %d' % c['pid'])
    if k == 'kill0':
        r = libc.kill(c['pid'], 0)
        return res(k, r == 0, ctypes.get_errno() if r != 0 else 0, 'pid %d' % c['pid'])
    if k == 'pidfd_getfd':
        pidfd = libc.syscall(434, c['pid'], 0)
        if pidfd < 0: return res(k, False, ctypes.get_errno(), 'pidfd_open(%d)' % c['pid'])
        fd = libc.syscall(438, pidfd, c['fd'], 0)
        return res(k, fd >= 0, ctypes.get_errno() if fd < 0 else 0, 'pidfd_getfd(%d, %d)' % (c['pid'], c['fd']))
    if k in ('sctp_connect', 'mptcp_connect'):
        s = None
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132 if k == 'sctp_connect' else 262)
            s.settimeout(c['timeout']); s.connect((c['host'], c['port'])); data = s.recv(200)
            return res(k, len(data) > 0, 0, 'answer: ' + data.decode(errors='replace'))
        except socket.timeout: return res(k, False, errno.ETIMEDOUT, 'timeout')
        except OSError as e: return res(k, False, e.errno)
        finally:
            if s: s.close()
    if k == 'read':
        try:
            with open(c['path'], 'rb') as f: data = f.read(64)
            return res(k, True, 0, c['path'] + ': read %d bytes' % len(data))
        except OSError as e: return res(k, False, e.errno, c['path'])
    if k in ('mkdir', 'unlink', 'rename'):
        try:
            if k == 'mkdir': os.mkdir(c['path'])
            elif k == 'unlink': os.unlink(c['path'])
            else: os.rename(c['path'], c['path'] + '.moved')
            return res(k, True, 0, c['path'])
        except OSError as e: return res(k, False, e.errno, c['path'])
    if k == 'bpf_obj_get':
        path = ctypes.create_string_buffer(c['path'].encode())
        attr = (ctypes.c_uint64 * 3)(); attr[0] = ctypes.addressof(path)
        fd = libc.syscall(321 if platform.machine() == 'x86_64' else 280, 7, ctypes.byref(attr), 24)
        return res(k, fd >= 0, ctypes.get_errno() if fd < 0 else 0, c['path'])
    if k == 'visible_pids':
        return res(k, True, 0, ' '.join(sorted(d for d in os.listdir('/proc') if d.isdigit())))
    return res(k, False, errno.EINVAL, 'unknown check')
print(json.dumps([run(c) for c in json.loads(sys.argv[1])]))
`;
