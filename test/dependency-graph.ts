// Dependency graphs of source files, for the tests that keep them free of circles: which files
// depend on which, and the groups of files that depend on each other round a loop.

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

/** Every TypeScript file under `dir`. */
export function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sourceFiles(join(dir, e.name)) : /\.tsx?$/.test(e.name) ? [join(dir, e.name)] : []));
}

/** The relative modules a file imports, as paths under `root` (static, re-exports, dynamic, `import("…")` types). */
export function importsOf(root: string, file: string): string[] {
  const text = readFileSync(file, "utf8");
  const specs = [...text.matchAll(/^(?:import|export)[^;]*?from "(\.[^"]+)"/gm), ...text.matchAll(/^import "(\.[^"]+)"/gm), ...text.matchAll(/\bimport\(\s*"(\.[^"]+)"\s*\)/g)].map(
    (m) => m[1],
  );
  return specs.map((s) => relative(root, resolve(dirname(file), s)).replace(/\.js$/, ".ts"));
}

/** From each file to the files it depends on. */
export type Graph = Map<string, Set<string>>;

/** Every group of two or more files that reach each other (strongly connected), each sorted. */
export function circles(g: Graph): string[][] {
  // Tarjan's algorithm, iterative so that a deep graph cannot overflow the stack.
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  for (const root of g.keys()) {
    if (index.has(root)) continue;
    const work: { node: string; edges: string[]; i: number }[] = [];
    const enter = (node: string) => {
      index.set(node, next);
      low.set(node, next++);
      stack.push(node);
      onStack.add(node);
      work.push({ node, edges: [...(g.get(node) ?? [])], i: 0 });
    };
    enter(root);
    while (work.length) {
      const top = work[work.length - 1];
      if (top.i < top.edges.length) {
        const to = top.edges[top.i++];
        if (!index.has(to)) enter(to);
        else if (onStack.has(to)) low.set(top.node, Math.min(low.get(top.node)!, index.get(to)!));
        continue;
      }
      work.pop();
      if (work.length) {
        const parent = work[work.length - 1].node;
        low.set(parent, Math.min(low.get(parent)!, low.get(top.node)!));
      }
      if (low.get(top.node) === index.get(top.node)) {
        const group: string[] = [];
        let n: string;
        do {
          n = stack.pop()!;
          onStack.delete(n);
          group.push(n);
        } while (n !== top.node);
        if (group.length > 1) out.push(group.sort());
      }
    }
  }
  return out;
}
