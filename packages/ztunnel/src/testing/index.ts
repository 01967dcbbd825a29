/**
 * Test support for ztunnel's tests and the repository's tests (`@zmesh/ztunnel/testing`):
 * never imported by ztunnel's own code, never exported from its index.
 */
export {
  DECISION_TABLE,
  type DecisionCase,
  TABLE_ROOT_NAMESPACE,
  TABLE_SERVER,
  TABLE_SOURCES,
  type TableDestination,
  type TableSource,
} from './decision-table.js';
