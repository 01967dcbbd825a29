import test from 'ava';
import { type Exchange, forwardableHeaders } from './http-exchange.js';

/** An HTTP/1.1 exchange with only what forwardableHeaders reads. */
function exchange(headers: Record<string, string | string[]>, clientAddress?: string): Exchange {
  return {
    protocol: 'h1',
    req: { headers },
    header: (name: string) => {
      const v = headers[name];
      return Array.isArray(v) ? v.join(', ') : v;
    },
    ...(clientAddress === undefined ? {} : { clientAddress }),
  } as unknown as Exchange;
}

test('the original client is appended to x-forwarded-for, after what the client wrote', (t) => {
  t.is(forwardableHeaders(exchange({ accept: '*/*' }, '10.244.1.2'))['x-forwarded-for'], '10.244.1.2');
  t.is(
    forwardableHeaders(exchange({ 'x-forwarded-for': '192.0.2.9' }, 'fd00:10:244:1::2'))['x-forwarded-for'],
    '192.0.2.9, fd00:10:244:1::2',
    'a claim the client made stays first; the last entry is the one this hop vouches for',
  );
  t.is(
    forwardableHeaders(exchange({ 'x-forwarded-for': ['192.0.2.9', '198.51.100.1'] }, '10.0.0.1'))[
      'x-forwarded-for'
    ],
    '192.0.2.9, 198.51.100.1, 10.0.0.1',
  );
  t.false('x-forwarded-for' in forwardableHeaders(exchange({ accept: '*/*' })), 'no source, no header');
});
