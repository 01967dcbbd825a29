import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { err, ok, type Result } from '../result.js';

/** Reads a YAML file; an unreadable file or bad YAML is a reason naming the file, never a throw. */
export async function readYamlFile(file: string): Promise<Result<unknown>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    return err([`${file}: cannot read: ${(e as Error).message}`]);
  }
  return parseYamlText(text, file);
}

/** Parses YAML text; an empty document is `{}`. */
export function parseYamlText(text: string, source: string): Result<unknown> {
  try {
    return ok(parseYaml(text) ?? {});
  } catch (e) {
    return err([`${source}: YAML: ${(e as Error).message.split('\n')[0]}`]);
  }
}
