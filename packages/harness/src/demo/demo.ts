export async function runDemo(): Promise<number> {
  console.error('demo: under construction');
  return 1;
}
