// The backends a server can offer beside its VM provider, by kind: what each takes from the
// config file and how it is made. core/open.ts makes whichever the options list, so a new backend
// is a folder of providers/ and an entry in MAKERS and fromConfig here; core does not change.
import type { Config } from "../config/config.js";
import type { Paths } from "../config/paths.js";
import { parseDuration } from "../schemas/durations.js";
import { CustomProvider, type CustomProviderOptions } from "./custom-http/custom-provider.js";
import { E2bProvider, type E2bProviderOptions } from "./e2b/e2b-provider.js";
import { LocalProvider } from "./local/local-provider.js";
import type { Provider } from "./provider.js";
import { RemoteProvider, type RemoteProviderOptions } from "./remote/remote-provider.js";

type Own<T> = Omit<T, "paths">;

/** The backends offered beside the VM provider, each with what it takes (absent: not offered). */
export interface ExtraProviders {
  /** The local provider (namespaces, no VM: not a security boundary). */
  local?: true;
  /** Sandboxes of another ForgeVM server. */
  remote?: Own<RemoteProviderOptions>;
  /** Sandboxes of an E2B-compatible service. */
  e2b?: Own<E2bProviderOptions>;
  /** A backend of the ForgeVM Custom HTTP provider protocol, under its name. */
  custom?: Own<CustomProviderOptions> & { name: string };
}

const MAKERS: { [K in keyof ExtraProviders]-?: (paths: Paths, o: NonNullable<ExtraProviders[K]>) => Provider } = {
  local: (paths) => new LocalProvider({ paths }),
  remote: (paths, o) => new RemoteProvider({ paths, ...o }),
  e2b: (paths, o) => new E2bProvider({ paths, ...o }),
  custom: (paths, o) => new CustomProvider({ paths, ...o }),
};

/** The providers `o` lists, made on this data directory, in MAKERS' order. */
export function makeExtraProviders(paths: Paths, o: ExtraProviders = {}): Provider[] {
  return (Object.keys(MAKERS) as (keyof ExtraProviders)[]).flatMap((kind) => {
    const given = o[kind];
    return given ? [(MAKERS[kind] as (p: Paths, g: typeof given) => Provider)(paths, given)] : [];
  });
}

/** The backends a configuration enables (providers.local, .remote, .e2b, .custom). */
export function extraProvidersFromConfig(p: Config["providers"]): ExtraProviders {
  return {
    ...(p.local.enabled ? { local: true as const } : {}),
    ...(p.remote.url ? { remote: { url: p.remote.url, apiKey: p.remote.api_key } } : {}),
    ...(p.e2b.api_url
      ? {
          e2b: {
            apiUrl: p.e2b.api_url,
            apiKey: p.e2b.api_key,
            sandboxUrl: p.e2b.sandbox_url || undefined,
            domain: p.e2b.domain || undefined,
            template: p.e2b.template,
          },
        }
      : {}),
    ...(p.custom.base_url
      ? {
          custom: {
            baseUrl: p.custom.base_url,
            apiKey: p.custom.api_key,
            timeoutMs: typeof p.custom.timeout === "number" ? p.custom.timeout * 1000 : parseDuration(p.custom.timeout, "providers.custom.timeout"),
            name: p.custom.name,
          },
        }
      : {}),
  };
}

/**
 * The provider spawns use when they name none: providers.default, where the ForgeVM API's name
 * "custom" means the Custom HTTP backend whatever name it runs under.
 */
export function defaultProviderName(p: Config["providers"]): string {
  return p.default === "custom" && p.custom.base_url ? p.custom.name : p.default;
}
