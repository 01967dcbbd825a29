export {
  type AppProtocol,
  type GatewayRef,
  type NetworkAddress,
  type Port,
  type Service,
  serviceKey,
  spiffeIdOf,
  type TunnelProtocol,
  type Workload,
  type WorkloadStatus,
} from './workload.js';
