export {
  type ConvertedPolicy,
  type ConvertOptions,
  convertAuthorizationPolicy,
  type TargetRef,
} from './authorization-policy.js';
export {
  convertedPeerAuthenticationName,
  isPeerAuthenticationPolicy,
  STATIC_STRICT_POLICY_NAME,
  staticStrictPolicy,
} from './peer-authentication.js';
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
