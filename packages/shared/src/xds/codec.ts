/**
 * The wire codec for zmesh's xDS resources: bytes ⇄ the shared model. Decoders validate
 * every field and return every reason (for a NACK); encoders take already-valid model
 * objects and throw only on a programming error (an IP that is not one).
 */
export { type DecodedAddress, decodeAddress, encodeAddress } from './address-codec.js';
export { decodeAuthorization, encodeAuthorization } from './authorization-codec.js';
export { encodeMessage } from './message-codec.js';
