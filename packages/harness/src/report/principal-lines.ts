/** One line per `istio_tcp_connections_opened_total` series: who ztunnel said talked to whom. */
export function principalLines(metrics: string): string[] {
  return metrics
    .split('\n')
    .filter((l) => l.startsWith('istio_tcp_connections_opened_total{'))
    .map((l) => {
      const label = (k: string) => new RegExp(`${k}="([^"]*)"`).exec(l)?.[1];
      return `${label('reporter')}: ${label('source_principal')} → ${label('destination_principal')} [${label('response_flags')}] ${l.split(' ').pop()}`;
    });
}
