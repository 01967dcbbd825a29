export { MeshMetrics, type TcpLabels } from './mesh-metrics.js';
