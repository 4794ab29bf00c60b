// What an environment spec may hold. Package names become words of shell commands in build
// steps, so each is checked against the grammar of its installer (pip's requirement, Debian's
// package[=version]) and anything else is a 400 that names it; lists are trimmed and de-duplicated.
import { parseReference } from "../../images/reference.js";
import type { EnvSpecRow } from "../../store/environments.js";
import { badRequest } from "../../http/errors.js";

export interface SpecInput {
  owner_id: string;
  name: string;
  base_image: string;
  python_packages?: string[];
  apt_packages?: string[];
  python_version?: string | null;
}

/** A spec's content, as stored. */
export type CleanSpec = Omit<EnvSpecRow, "id" | "created_at" | "updated_at">;

const MAX_PACKAGES = 200;
const OP = "(?:===|==|>=|<=|~=|!=|>|<)";
const VERSION = "[A-Za-z0-9.*+!_-]+";
/** A pip requirement: name, extras, version constraints (no URLs, options or markers). */
const PIP = new RegExp(`^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\\])?(?:${OP}${VERSION}(?:,${OP}${VERSION})*)?$`);
/** A Debian package, optionally pinned: name[=version] or name[:arch]. */
const APT = /^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+:~-]+)?$/;
const PY_VERSION = /^3\.\d{1,2}$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Trims, drops empties and repeats (keeping the first), and checks each entry. */
function cleanList(field: string, list: unknown, check: RegExp, what: string): string[] {
  if (list === undefined || list === null) return [];
  if (!Array.isArray(list)) throw badRequest(`${field}: must be a list of ${what}`);
  const out: string[] = [];
  for (const raw of list) {
    if (typeof raw !== "string") throw badRequest(`${field}: every entry must be a string`);
    const v = raw.trim().replace(/\s+/g, "");
    if (!v || out.includes(v)) continue;
    if (v.length > 200 || !check.test(v)) throw badRequest(`${field}: "${raw.trim()}" is not ${what}`);
    out.push(v);
  }
  if (out.length > MAX_PACKAGES) throw badRequest(`${field}: at most ${MAX_PACKAGES} packages`);
  return out;
}

/** A spec as stored, or a 400 naming the field that is wrong. */
export function cleanSpec(input: SpecInput): CleanSpec {
  const owner = typeof input.owner_id === "string" ? input.owner_id.trim() : "";
  if (!owner) throw badRequest("owner_id: required (who the environment belongs to)");
  if (owner.length > 128) throw badRequest("owner_id: at most 128 characters");
  const name = typeof input.name === "string" ? input.name.trim() : "";
  if (!name) throw badRequest("name: required");
  if (!NAME.test(name)) throw badRequest(`name: "${name}" must be letters, digits, ".", "_" or "-" (at most 128, starting with a letter or digit)`);
  const base = typeof input.base_image === "string" ? input.base_image.trim() : "";
  if (!base) throw badRequest("base_image: required (an image reference such as python:3.12-slim)");
  if (!base.startsWith("forgevm/")) {
    try {
      parseReference(base);
    } catch (e) {
      throw badRequest(`base_image: ${(e as Error).message}`);
    }
  } else if (/[\s@]/.test(base)) throw badRequest(`base_image: "${base}" is not an image name`);
  const pv = input.python_version === undefined || input.python_version === null ? "" : String(input.python_version).trim();
  if (pv && !PY_VERSION.test(pv)) throw badRequest(`python_version: "${pv}" must be MAJOR.MINOR, such as 3.11`);
  return {
    owner_id: owner,
    name,
    base_image: base,
    python_packages: cleanList("python_packages", input.python_packages, PIP, "a pip requirement (name, extras, version constraints)"),
    apt_packages: cleanList("apt_packages", input.apt_packages, APT, "a Debian package name (name or name=version)"),
    python_version: pv || null,
  };
}
