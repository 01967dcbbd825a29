export {
  closeFds,
  NATIVE_ADDON,
  type ReceivedPacket,
  SeqpacketServer,
  SeqpacketSocket,
  seqpacketUnavailableReason,
} from './seqpacket.js';
export {
  decodeAck,
  decodeHello,
  decodeRequest as decodeZdsRequest,
  encodeAck,
  encodeHello,
  encodeRequest as encodeZdsRequest,
  ZDS_MAX_MESSAGE,
  ZDS_VERSION_V1,
  type ZdsRequest,
  type ZdsWorkloadInfo,
} from './zds-messages.js';
export { type ZdsPod, ZdsServer, type ZdsServerOptions } from './zds-server.js';
