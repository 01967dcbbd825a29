export {
  BpfCapture,
  type BpfCaptureOptions,
  type CaptureCounters,
  type CapturePod,
  type ConnectionKey,
  fdOf,
} from './bpf-capture.js';
export { HBONE_PORT, type OriginalDestination, OUTBOUND_PORT, PIN_ROOT } from './bpf-layout.js';
export { CaptureMetrics } from './capture-metrics.js';
export {
  connectInNetns,
  inNetns,
  type ListenOptions,
  listenInNetns,
  type Netns,
  NetnsHandle,
  netnsCookieOf,
  socketInNetns,
} from './netns-listener.js';
export {
  type AddWorkloadRequest,
  MAX_AGENT_CONNECTIONS,
  type NodeAgentHandler,
  NodeAgentServer,
  type NodeAgentServerOptions,
} from './node-agent.js';
export { AGENT_REQUEST_TIMEOUT_MS, NodeAgentClient } from './node-agent-client.js';
export { decodeRequest, type NodeAgentReply, type NodeAgentRequest } from './node-agent-protocol.js';
export { peerCred, SysError } from './sys.js';
