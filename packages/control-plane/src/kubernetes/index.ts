// Controller mode, apart from the package's index so that importing @zmesh/control-plane
// does not load @kubernetes/client-node (the operator CLI starts faster without it).
export { KubeController, type KubeControllerOptions, LEASE_NAME } from './kube-controller.js';
export { LeaseElector, type LeaseElectorOptions } from './lease-elector.js';
export { type WaypointTemplate, waypointObjects } from './waypoint-objects.js';
