/** Test-only helpers (fake PKI, echo upstream, hand-rolled HTTP/2): `@zmesh/shared/testing`. */
export { replaceAt, valuePaths } from './mutate.js';
export { FRAME, type Frame, frame, goawayCode, RawH2 } from './raw-h2.js';
export {
  echoUpstream,
  makePki,
  metricValue,
  openFds,
  type Pki,
  sa,
  settleFds,
  startEcho,
  startHbone,
  TRUST_DOMAIN,
} from './transport-fixtures.js';
