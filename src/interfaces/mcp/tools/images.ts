// What sandboxes can be made from: local images, pulls from registries, templates.
import { Type } from "typebox";
import { familiarName } from "../../../core/images/image-reference.js";
import { ForgevmError } from "../../../http/errors.js";
import { checkImage, imageAllowed } from "../policy.js";
import { tool } from "../tool.js";

/** Progress of a pull is reported at most this often. */
const PULL_PROGRESS_EVERY_MS = 200;

export const images = tool({
  name: "images",
  title: "List images",
  description: "List the local images a sandbox can be created from (create_sandbox's image).",
  input: Type.Object({}, { additionalProperties: false }),
  output: Type.Object({ images: Type.Array(Type.Object({ name: Type.String(), size: Type.Integer(), created_at: Type.String(), in_use: Type.Boolean() })) }),
  annotations: { readOnlyHint: true },
  async run(ctx) {
    const list = (await ctx.forge.images.list()).filter((i) => imageAllowed(ctx.policy, i.name));
    const result = { images: list.map((i) => ({ name: familiarName(i.name), size: i.size, created_at: i.createdAt, in_use: i.inUse })) };
    return { result, text: list.map((i) => `${i.name} (${(i.size / 1048576).toFixed(0)} MiB)`).join("\n") || "(no images)" };
  },
});

export const pullImage = tool({
  name: "pull_image",
  title: "Pull an image",
  description: "Download an OCI image from a registry (e.g. python:3.12-slim) so sandboxes can be created from it.",
  input: Type.Object(
    { reference: Type.String({ minLength: 1, maxLength: 512, description: 'An image reference: "python:3.12-slim", "ghcr.io/org/app:tag"' }) },
    { additionalProperties: false },
  ),
  output: Type.Object({ name: Type.String(), digest: Type.Union([Type.String(), Type.Null()]), size: Type.Integer(), duration_ms: Type.Integer() }),
  annotations: { openWorldHint: true, idempotentHint: true },
  async run(ctx, a) {
    const name = ctx.forge.images.canonicalName(a.reference);
    checkImage(ctx.policy, a.reference, "image", name);
    const t0 = performance.now();
    const sizes = new Map<number, number>();
    const got = new Map<number, number>();
    let last = 0;
    const onLayerBytes = (layer: { index: number; count: number; size: number }, received: number) => {
      sizes.set(layer.index, layer.size);
      got.set(layer.index, received);
      const now = performance.now();
      if (now - last < PULL_PROGRESS_EVERY_MS && received < layer.size) return;
      last = now;
      const sum = (m: Map<number, number>) => [...m.values()].reduce((x, y) => x + y, 0);
      ctx.progress(sum(got), sum(sizes), `layer ${layer.index + 1}/${layer.count}: ${(received / 1048576).toFixed(1)} of ${(layer.size / 1048576).toFixed(1)} MiB`);
    };
    ctx.progress(0, undefined, `pulling ${name}`);
    // A pull is shared by everyone asking for the same image, so a cancelled call stops
    // waiting for it rather than breaking it for the others; the layers it fetched stay cached.
    const cancelled = new Promise<never>((_, reject) => {
      const fail = () => reject(new ForgevmError("BAD_REQUEST", "pull_image was cancelled"));
      if (ctx.signal.aborted) fail();
      ctx.signal.addEventListener("abort", fail, { once: true });
    });
    const img = await Promise.race([ctx.forge.images.pull(a.reference, undefined, onLayerBytes), cancelled]);
    const result = { name: img.name, digest: img.digest ?? null, size: img.size, duration_ms: Math.round(performance.now() - t0) };
    return { result, text: `pulled ${img.name} (${(img.size / 1048576).toFixed(1)} MiB) in ${result.duration_ms} ms` };
  },
});

export const templates = tool({
  name: "templates",
  title: "List templates",
  description: "List the templates (named settings: image, size, setup, allowlist) create_sandbox can use.",
  input: Type.Object({}, { additionalProperties: false }),
  output: Type.Object({
    templates: Type.Array(
      Type.Object({
        name: Type.String(),
        description: Type.Union([Type.String(), Type.Null()]),
        image: Type.Union([Type.String(), Type.Null()]),
        memory_mb: Type.Union([Type.Integer(), Type.Null()]),
        vcpus: Type.Union([Type.Integer(), Type.Null()]),
      }),
    ),
  }),
  annotations: { readOnlyHint: true },
  async run(ctx) {
    const list = ctx.forge.templates.list().filter((t) => imageAllowed(ctx.policy, t.name));
    const result = {
      templates: list.map((t) => ({ name: t.name, description: t.description ?? null, image: t.image ?? null, memory_mb: t.memory_mb ?? null, vcpus: t.cpu_cores ?? null })),
    };
    return { result, text: list.map((t) => `${t.name}: ${t.description ?? t.image ?? ""}`).join("\n") || "(no templates)" };
  },
});
