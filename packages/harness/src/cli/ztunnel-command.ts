export async function runZtunnel(_options: Record<string, string>): Promise<void> {
  throw new Error('ztunnel: under construction');
}
