export {
  type ConvertedPolicy,
  type ConvertedRequestAuthentication,
  type ConvertOptions,
  convertAuthorizationPolicy,
  convertRequestAuthentication,
  type TargetRef,
} from './authorization-policy.js';
export {
  type ConditionAttr,
  type JwtLocation,
  type JwtRule,
  jwksHostKind,
  jwksUriRefusal,
  type L7Action,
  type L7Policy,
  type PolicyCondition,
  type PolicyOperation,
  type PolicyRule,
  type PolicySource,
  type RequestAuthn,
  readPolicy,
  readRequestAuthn,
} from './l7-policy.js';
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
