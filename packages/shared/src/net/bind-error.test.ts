import test from 'ava';
import { bindError } from './bind-error.js';

const errno = (code: string, message = `listen ${code}`) => Object.assign(new Error(message), { code });

test('EACCES on a privileged port says what the port needs', (t) => {
  const e = bindError('HBONE', { host: '127.0.0.1', port: 443 }, errno('EACCES'));
  t.is(
    e.message,
    'HBONE listener cannot bind 127.0.0.1:443: EACCES (permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE)',
  );
  t.is(e.flag, 'CFG');
});

test('the errno is read from the message when the error has no code (grpc-js)', (t) => {
  const grpc = new Error(
    'No address added out of total 1 resolved errors: [listen EADDRINUSE: address already in use ::1:15010]',
  );
  const e = bindError('xDS/CA', { host: '::1', port: 15010 }, grpc);
  t.is(e.context.errno, 'EADDRINUSE');
  t.is(e.context.address, '[::1]:15010');
  t.is(e.cause, grpc);
});

test('Unix sockets and inherited sockets are named by path and fd; an unknown errno keeps its text', (t) => {
  t.is(
    bindError(
      'node-agent',
      { path: '/run/zmesh/agent.sock' },
      errno('ENOTDIR', 'listen ENOTDIR: not a directory'),
    ).message,
    'node-agent listener cannot bind unix:/run/zmesh/agent.sock: ENOTDIR (listen ENOTDIR: not a directory)',
  );
  t.is(bindError('outbound', { fd: 12 }, new Error('bad fd')).context.address, 'inherited socket fd 12');
});
