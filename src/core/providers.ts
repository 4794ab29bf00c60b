// The providers one server runs sandboxes on, by name: the default and any others the config
// enables. A spawn picks one (its `provider`, its template's, or the default); everything done to
// a sandbox afterwards is checked against the features of the provider it runs on.
import type { Provider, ProviderFeatures } from "../providers/provider.js";
import { LOCAL_WARNING } from "../providers/local/local-provider.js";
import { COMPAT_PROVIDERS } from "../config/compat-config.js";
import { badRequest } from "../http/errors.js";

/** What a sandbox on the provider called `name` must say about itself, if anything (shown in its JSON). */
export function providerWarning(name: string): string | undefined {
  return name === "local" ? LOCAL_WARNING : undefined;
}

/** What each refused feature is called in the error a user sees. */
const FEATURE_WORDS: Record<"snapshots" | "volumes" | "commit" | "init", string> = {
  snapshots: "take snapshots",
  init: "boot an image's systemd as init",
  volumes: "attach volumes or host directories",
  commit: "commit a sandbox to an image",
};

export class Providers {
  private readonly byName: Map<string, Provider>;

  constructor(
    all: Provider[],
    /** The provider of spawns that name none. */
    readonly defaultName: string,
  ) {
    this.byName = new Map(all.map((p) => [p.name, p]));
    if (!this.byName.has(defaultName)) throw new Error(`providers.default is "${defaultName}", which is not enabled (enabled: ${this.names().join(", ")})`);
  }

  get default(): Provider {
    return this.byName.get(this.defaultName)!;
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  all(): Provider[] {
    return [...this.byName.values()];
  }

  /** The provider called `name`, or undefined. */
  find(name: string): Provider | undefined {
    return this.byName.get(name);
  }

  /** The provider a request names ("" or absent: the default; the ForgeVM API's names as what serves them); a 400 naming `field` otherwise. */
  pick(name: string | undefined, field: string): Provider {
    if (!name) return this.default;
    const p = this.byName.get(name) ?? this.byName.get(COMPAT_PROVIDERS[name] ?? "");
    if (!p) throw badRequest(`${field}: provider "${name}" is not available (available: ${this.names().join(", ")})`);
    return p;
  }

  /** The provider a sandbox runs on (its row's name; rows of a provider no longer enabled fall back to the default). */
  of(row: { provider: string }): Provider {
    return this.byName.get(row.provider) ?? this.default;
  }

  /** Refuses what a provider cannot do, with `subject` (a field, a sandbox) and the provider named. */
  require(p: Provider, feature: keyof typeof FEATURE_WORDS & keyof ProviderFeatures, subject: string): void {
    if (!p.features[feature]) throw badRequest(`${subject}: provider ${p.name} cannot ${FEATURE_WORDS[feature]}`);
  }
}
