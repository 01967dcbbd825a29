/**
 * Where the control plane keeps its state unless told: /var/lib/zmesh for root (a system
 * service), else zmesh-state under the working directory.
 * (Its own module: the CLI's help reads it without loading the store.)
 */
export function defaultStateDir(): string {
  return process.getuid?.() === 0 ? '/var/lib/zmesh' : 'zmesh-state';
}
