export { EVENT_LOOP_SAMPLE_MS, MeshMetrics, type TcpLabels } from './mesh-metrics.js';
