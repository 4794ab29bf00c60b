// The SDK's TypeScript interfaces by member name, for tests that hold a wire message's copies together.
import { readFileSync } from "node:fs";
import ts from "typescript";

/** Member names of every interface in a TypeScript file. */
export function tsInterfaces(file: string): Map<string, string[]> {
  const src = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const out = new Map<string, string[]>();
  src.forEachChild((n) => {
    if (ts.isInterfaceDeclaration(n))
      out.set(
        n.name.text,
        n.members
          .filter((m) => m.name && !ts.isIndexSignatureDeclaration(m))
          .map((m) => (m.name as ts.Identifier).text)
          .sort(),
      );
  });
  return out;
}
