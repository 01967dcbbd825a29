export {
  type ConvertedPolicy,
  type ConvertOptions,
  convertAuthorizationPolicy,
  type TargetRef,
} from './authorization-policy.js';
export { type AuthzBenchResult, benchOnce, runAuthzBench } from './bench-authz.js';
export {
  DECISION_TABLE,
  type DecisionCase,
  TABLE_ROOT_NAMESPACE,
  TABLE_SERVER,
  TABLE_SOURCES,
  type TableDestination,
  type TableSource,
} from './decision-table.js';
export {
  AuthorizationStore,
  type AuthorizationStoreOptions,
  type AuthzDestination,
  type Decision,
  type DecisionReason,
  type DryRunVerdict,
  decisionError,
} from './evaluator.js';
export { type ConnectionAttributes, stringMatches } from './policy-match.js';
export {
  type Action,
  type Address,
  type Authorization,
  type Clause,
  type Match,
  policyKey,
  type Rule,
  type Scope,
  type ServiceAccountMatch,
  type StringMatch,
  validateAuthorization,
} from './policy-model.js';
