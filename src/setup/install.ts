// Where this ForgeVM runs from: a checkout (./setup.sh built it; `git pull` updates it) or an
// installation of the npm package (`forgevm upgrade` updates it). The same files are laid out
// the same way in both, so every path below the root is found by one rule.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The root of the checkout or of the installed package (dist/src/setup/ is three folders down). */
export const INSTALL_ROOT = fileURLToPath(new URL("../../../", import.meta.url)).replace(/\/$/, "");

/** Whether this is a git checkout (tests and benchmarks run only from one). */
export const IS_CHECKOUT = existsSync(join(INSTALL_ROOT, ".git"));

/** How this ForgeVM is installed, as `version` and `status` say it. */
export const INSTALLED_AS = IS_CHECKOUT ? "checkout" : "package";
export const INSTALLED_AS_WORDS = `${IS_CHECKOUT ? "a checkout" : "the npm package"} at ${INSTALL_ROOT}`;

/** The package's name and version, as its package.json says. */
export const PACKAGE = JSON.parse(readFileSync(join(INSTALL_ROOT, "package.json"), "utf8")) as { name: string; version: string };

/**
 * The npm prefix of a global installation (`PREFIX/lib/node_modules/NAME`), where its `bin/forgevm`
 * is linked; null for a checkout, or a package installed some other way.
 */
export function globalPrefix(): string | null {
  const modules = dirname(INSTALL_ROOT);
  if (IS_CHECKOUT || !modules.endsWith("/lib/node_modules")) return null;
  return dirname(dirname(modules));
}

/** The Debian packages of one use (`run`, `build`, `test`), as deploy/debian-packages.txt lists them. */
export function debianPackages(use: "run" | "build" | "test"): string[] {
  const text = readFileSync(join(INSTALL_ROOT, "deploy", "debian-packages.txt"), "utf8");
  const line = text.split("\n").find((l) => l.startsWith(`${use}: `));
  return line
    ? line
        .slice(use.length + 2)
        .trim()
        .split(/\s+/)
    : [];
}
