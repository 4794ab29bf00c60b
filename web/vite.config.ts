// The web console's build: React and xterm.js bundled into dist/web, which `forgevm serve` serves
// at /. Everything is in the bundle (no CDN), so the console works offline.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/",
  logLevel: "warn",
  build: {
    outDir: fileURLToPath(new URL("../dist/web", import.meta.url)),
    emptyOutDir: true,
    chunkSizeWarningLimit: 2048,
  },
});
