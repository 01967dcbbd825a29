/** The header zmesh carries a remaining budget in, for non-gRPC traffic; shrinks per hop. */
export const DEADLINE_HEADER = 'x-zmesh-deadline-ms';
/** gRPC over HTTP/2 spec: "TimeoutValue" is at most 8 digits. */
const GRPC_TIMEOUT = /^(\d{1,8})([HMSmun])$/;
const GRPC_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/**
 * The remaining budget a request arrived with, in ms: the smaller of `grpc-timeout` and
 * x-zmesh-deadline-ms. undefined when neither is present; a malformed value is ignored.
 */
export function incomingBudgetMs(header: (name: string) => string | undefined): number | undefined {
  let budget: number | undefined;
  const grpc = header('grpc-timeout');
  const m = grpc === undefined ? null : GRPC_TIMEOUT.exec(grpc);
  if (m) budget = Number(m[1]) * GRPC_UNIT_MS[m[2]!]!;
  const own = header(DEADLINE_HEADER);
  if (own !== undefined && /^-?\d{1,12}$/.test(own))
    budget = Math.min(budget ?? Number.POSITIVE_INFINITY, Number(own));
  return budget;
}

/** grpc-timeout for what is left, in whole milliseconds (rounded down, at least 1). */
export function grpcTimeoutValue(ms: number): string {
  return `${Math.max(1, Math.floor(ms))}m`;
}
