// How the E2B tests point the unmodified SDKs at a test server: the settings a user would set,
// and nothing else of E2B's from the environment (the suite sets hostile ones).

/** Points the SDKs at this server, and only at it: whatever E2B settings the user has are replaced. */
export function e2bEnv(url: string, key: string): void {
  for (const k of Object.keys(process.env)) if (k.startsWith("E2B_")) delete process.env[k];
  process.env.E2B_API_URL = url;
  process.env.E2B_SANDBOX_URL = url;
  // Volume contents: the SDK does not derive this one from E2B_API_URL.
  process.env.E2B_VOLUME_API_URL = url;
  process.env.E2B_API_KEY = key;
}
