export { bytesToIp, canonicalIp, formatHostPort, ipFamily, ipToBytes } from './ip.js';
