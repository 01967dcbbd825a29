import { FieldReader } from '../config/field-reader.js';
import { err, ok, type Result } from '../result.js';
import { convertRule, type RuleContext, unknownKeys } from './authorization-policy-rules.js';
import { readJwtRule, readRule } from './l7-policy.js';
import { type Action, type Authorization, isRecord, type Rule, type Scope, show } from './policy-model.js';

/**
 * The user-facing Istio `AuthorizationPolicy` (security.istio.io) as parsed from YAML, to
 * the L4 model ztunnel enforces, following Istio's ambient controller
 * (`convertAuthorizationPolicy` in pilot/pkg/serviceregistry/kube/controller/ambient):
 * - `targetRefs` means the policy is for a waypoint; ztunnel gets nothing from it;
 * - no selector: NAMESPACE scope, or GLOBAL in the root namespace; a selector: WORKLOAD_SELECTOR;
 * - ALLOW and DENY only: ztunnel cannot do AUDIT or CUSTOM (Istio reports and skips them);
 * - L7 attributes fail closed (see authorization-policy-rules.ts), with a warning.
 * Unlike Istio's converter, which skips malformed ports and CIDRs silently (narrowing an
 * ALLOW, widening nothing a DENY needs), bad input here is rejected with every reason.
 */
export interface TargetRef {
  readonly group?: string;
  readonly kind: string;
  readonly name: string;
}

export type ConvertedPolicy =
  | {
      readonly target: 'ztunnel';
      readonly authorization: Authorization;
      readonly warnings: readonly string[];
      /** matchLabels for WORKLOAD_SELECTOR scope; the control plane lists the policy on matching workloads. */
      readonly selector?: Readonly<Record<string, string>>;
    }
  | {
      readonly target: 'waypoint';
      readonly name: string;
      readonly namespace: string;
      readonly targetRefs: readonly TargetRef[];
      readonly warnings: readonly string[];
    };

export interface ConvertOptions {
  /** Policies without a selector here are mesh-wide (GLOBAL). Default istio-system. */
  readonly rootNamespace?: string;
}

const SPEC_KEYS = ['selector', 'targetRef', 'targetRefs', 'action', 'provider', 'rules'];
/** What a zmesh waypoint serves (Istio also takes ServiceEntry and GatewayClass: refused here, never ignored). */
const TARGET_KINDS = ['Gateway', 'Service'];
const DRY_RUN_ANNOTATION = 'istio.io/dry-run';

export function convertAuthorizationPolicy(
  input: unknown,
  options: ConvertOptions = {},
): Result<ConvertedPolicy> {
  const reasons: string[] = [];
  const warnings: string[] = [];
  if (!isRecord(input)) return err(['policy: must be an object']);
  if (input.kind !== undefined && input.kind !== 'AuthorizationPolicy') {
    reasons.push(`kind: must be AuthorizationPolicy, got ${show(input.kind)}`);
  }
  const meta = readMetadata(input.metadata, reasons);
  const spec = input.spec ?? {};
  if (!isRecord(spec)) return err([...reasons, 'spec: must be an object']);
  unknownKeys(spec, SPEC_KEYS, 'spec', reasons);
  const action = readAction(spec.action, reasons);
  const selector = readSelector(spec.selector, reasons);
  const targetRefs = readTargetRefs(spec, reasons);
  if (selector !== undefined && targetRefs.length > 0)
    reasons.push('spec: set selector or targetRefs, not both');
  const ctx: RuleContext = {
    action: action === 'DENY' ? 'DENY' : 'ALLOW',
    namespace: meta.namespace,
    reasons,
    warnings,
  };
  // A waypoint's policy is checked by the waypoint's own reader: what it refuses, apply refuses.
  const rules = targetRefs.length > 0 ? waypointRules(spec.rules, reasons) : convertRules(spec.rules, ctx);
  if (targetRefs.length > 0 && action === 'CUSTOM') {
    reasons.push('spec.action: CUSTOM (external authorization) is not supported by the zmesh waypoint');
  }
  if (targetRefs.length === 0 && (action === 'AUDIT' || action === 'CUSTOM')) {
    reasons.push(
      `spec.action: ztunnel does not support the ${action} action; target a waypoint with targetRefs`,
    );
  }
  if (reasons.length > 0) return err(reasons);
  if (targetRefs.length > 0) {
    return ok({ target: 'waypoint', name: meta.name, namespace: meta.namespace, targetRefs, warnings: [] });
  }
  const rootNamespace = options.rootNamespace ?? 'istio-system';
  const scope: Scope =
    selector !== undefined ? 'WORKLOAD_SELECTOR' : meta.namespace === rootNamespace ? 'GLOBAL' : 'NAMESPACE';
  const authorization: Authorization = {
    name: meta.name,
    namespace: meta.namespace,
    scope,
    action: ctx.action,
    rules,
    dryRun: meta.dryRun,
  };
  return ok({ target: 'ztunnel', authorization, warnings, ...(selector === undefined ? {} : { selector }) });
}

/** The rules as the waypoint reads them; reasons as `spec.rules[i]…: reason`. */
function waypointRules(v: unknown, reasons: string[]): Rule[] {
  const r = new FieldReader('spec');
  r.array(v, 'rules').forEach((rule, i) => {
    readRule(r, rule, `rules[${i}]`);
  });
  for (const reason of r.reasons) reasons.push(reason.replace(/^spec: /, 'spec.'));
  return [];
}

export interface ConvertedRequestAuthentication {
  readonly name: string;
  readonly namespace: string;
  readonly targetRefs: readonly TargetRef[];
}

/**
 * Admission of an Istio RequestAuthentication (security.istio.io/v1): zmesh verifies JWTs
 * at waypoints only, so it must name one with targetRefs; every jwtRule goes through the
 * waypoint's own reader (issuer, audiences, jwks or an in-mesh jwksUri, token locations).
 */
export function convertRequestAuthentication(input: unknown): Result<ConvertedRequestAuthentication> {
  const reasons: string[] = [];
  if (!isRecord(input)) return err(['RequestAuthentication: must be an object']);
  if (input.kind !== undefined && input.kind !== 'RequestAuthentication') {
    reasons.push(`kind: must be RequestAuthentication, got ${show(input.kind)}`);
  }
  const meta = readMetadata(input.metadata, reasons);
  const spec = input.spec ?? {};
  if (!isRecord(spec)) return err([...reasons, 'spec: must be an object']);
  unknownKeys(spec, ['selector', 'targetRef', 'targetRefs', 'jwtRules'], 'spec', reasons);
  const targetRefs = readTargetRefs(spec, reasons);
  if (targetRefs.length === 0) {
    reasons.push(
      'spec.targetRefs: zmesh verifies JWTs at waypoints only; name a waypoint Gateway or a Service with targetRefs (a selector alone selects nothing)',
    );
  }
  if (spec.selector !== undefined && targetRefs.length > 0)
    reasons.push('spec: set selector or targetRefs, not both');
  const r = new FieldReader('spec');
  r.array(spec.jwtRules, 'jwtRules').forEach((rule, i) => {
    readJwtRule(r, rule, `jwtRules[${i}]`);
  });
  for (const reason of r.reasons) reasons.push(reason.replace(/^spec: /, 'spec.'));
  if (reasons.length > 0) return err(reasons);
  return ok({ name: meta.name, namespace: meta.namespace, targetRefs });
}

function readMetadata(v: unknown, reasons: string[]): { name: string; namespace: string; dryRun: boolean } {
  const m = isRecord(v) ? v : {};
  if (!isRecord(v)) reasons.push('metadata: must be an object');
  for (const f of ['name', 'namespace'] as const) {
    if (typeof m[f] !== 'string' || m[f] === '') reasons.push(`metadata.${f}: must be a non-empty string`);
  }
  const annotations = isRecord(m.annotations) ? m.annotations : {};
  const flag = annotations[DRY_RUN_ANNOTATION];
  if (flag !== undefined && flag !== 'true' && flag !== 'false') {
    reasons.push(`metadata.annotations.${DRY_RUN_ANNOTATION}: must be "true" or "false", got ${show(flag)}`);
  }
  return { name: String(m.name ?? ''), namespace: String(m.namespace ?? ''), dryRun: flag === 'true' };
}

function readAction(v: unknown, reasons: string[]): Action | 'AUDIT' | 'CUSTOM' {
  if (v === undefined || v === 'ALLOW') return 'ALLOW';
  if (v === 'DENY' || v === 'AUDIT' || v === 'CUSTOM') return v;
  reasons.push(`spec.action: must be one of ALLOW, DENY, AUDIT, CUSTOM, got ${show(v)}`);
  return 'ALLOW';
}

/** An absent selector or one with no labels selects the whole namespace. */
function readSelector(v: unknown, reasons: string[]): Record<string, string> | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isRecord(v)) {
    reasons.push('spec.selector: must be an object');
    return undefined;
  }
  unknownKeys(v, ['matchLabels'], 'spec.selector', reasons);
  const labels = v.matchLabels ?? {};
  if (!isRecord(labels)) {
    reasons.push('spec.selector.matchLabels: must be a map of strings');
    return undefined;
  }
  for (const [k, val] of Object.entries(labels)) {
    if (typeof val !== 'string')
      reasons.push(`spec.selector.matchLabels.${k}: must be a string, got ${show(val)}`);
  }
  return Object.keys(labels).length === 0 ? undefined : (labels as Record<string, string>);
}

/** `targetRefs`, or the deprecated single `targetRef`. */
function readTargetRefs(spec: Record<string, unknown>, reasons: string[]): TargetRef[] {
  const raw =
    spec.targetRef === undefined ? spec.targetRefs : [spec.targetRef, ...((spec.targetRefs as []) ?? [])];
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) {
    reasons.push('spec.targetRefs: must be a list');
    return [];
  }
  const out: TargetRef[] = [];
  for (let i = 0; i < raw.length; i++) {
    const r: unknown = raw[i];
    const p = `spec.targetRefs[${i}]`;
    if (!isRecord(r)) {
      reasons.push(`${p}: must be an object`);
      continue;
    }
    unknownKeys(r, ['group', 'kind', 'name', 'namespace'], p, reasons);
    if (typeof r.kind !== 'string' || !TARGET_KINDS.includes(r.kind)) {
      reasons.push(`${p}.kind: must be one of ${TARGET_KINDS.join(', ')}, got ${show(r.kind)}`);
    }
    if (typeof r.name !== 'string' || r.name === '') reasons.push(`${p}.name: must be a non-empty string`);
    if (r.group !== undefined && typeof r.group !== 'string') reasons.push(`${p}.group: must be a string`);
    out.push({
      kind: String(r.kind),
      name: String(r.name),
      ...(typeof r.group === 'string' ? { group: r.group } : {}),
    });
  }
  return out;
}

function convertRules(v: unknown, ctx: RuleContext): Rule[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) {
    ctx.reasons.push('spec.rules: must be a list');
    return [];
  }
  const rules: Rule[] = [];
  const l7 = new Set<string>();
  for (let i = 0; i < v.length; i++) {
    const out = convertRule(v[i], `spec.rules[${i}]`, ctx);
    for (const a of out.l7) l7.add(a);
    if (out.rule !== undefined) rules.push(out.rule);
  }
  if (l7.size > 0) ctx.warnings.push(l7Warning([...l7].sort(), ctx.action, rules.length));
  return rules;
}

function l7Warning(found: string[], action: Action, kept: number): string {
  const head =
    `ztunnel does not support HTTP attributes (found: ${found.join(', ')}). ` +
    'In ambient mode you must use a waypoint proxy to enforce HTTP rules. ';
  if (action === 'DENY') {
    return `${head}DENY policy with HTTP attributes is enforced without the HTTP rules. This will be more restrictive than requested.`;
  }
  const tail = kept === 0 ? ' No rule is left, so this policy denies every connection it selects.' : '';
  return `${head}Within an ALLOW policy, rules matching HTTP attributes are omitted. This will be more restrictive than requested.${tail}`;
}
