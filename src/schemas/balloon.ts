// The REST shapes of a sandbox's balloon (docs/rest-api.md): how much of its memory it may use,
// changed while it runs.
import { Type } from "typebox";
import { MemoryMb } from "./fields.js";
import { Body } from "./rest.js";

export const BalloonRequest = Body(
  { memory_mb: MemoryMb("the RAM to leave the sandbox, at most the memory it was given; the rest goes back to the host") },
  { $id: "BalloonRequest" },
);

export const BalloonInfo = Type.Object(
  {
    memory_mb: Type.Integer({ description: "the memory the sandbox was given" }),
    actual_mb: Type.Integer({ description: "what its balloon leaves it now" }),
    guest_total_mb: Type.Integer({ description: "the guest kernel's total (MemTotal) now" }),
    guest_available_mb: Type.Integer({ description: "what the guest kernel counts as available (MemAvailable) now" }),
  },
  { $id: "BalloonInfo" },
);
