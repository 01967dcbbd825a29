import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/** Bound on one external command (bpftool, mount). */
const BPFTOOL_TIMEOUT_MS = 10_000;

/** Bound on what one external command may print before it is cut off (execFile's maxBuffer). */
const TOOL_OUTPUT_BYTES = 1024 * 1024;

const execFileAsync = promisify(execFile);

/**
 * Runs an external command (bpftool, mount) within BPFTOOL_TIMEOUT_MS; a failure rejects
 * with the command line and its stderr. node:child_process rather than execa (which the
 * harness uses): in the long-running proxy, execa's module graph kept ~4 MB more resident
 * once capture had run its first command (docs/performance.md, "Memory").
 */
export async function runTool(file: string, args: string[]): Promise<void> {
  await execFileAsync(file, args, { timeout: BPFTOOL_TIMEOUT_MS, maxBuffer: TOOL_OUTPUT_BYTES });
}
