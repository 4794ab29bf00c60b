// The schemas of the numbers and maps every interface takes for the same thing, over the bounds of
// bounds.ts, so that each is one definition.
import { Type, type TProperties } from "typebox";
import { DISK_MB, MEMORY_MB, UNIX_ID, VCPUS } from "./bounds.js";

const withDescription = (description?: string) => (description ? { description } : {});
export const MemoryMb = (description?: string) => Type.Integer({ ...MEMORY_MB, ...withDescription(description) });
export const DiskMb = (description?: string) => Type.Integer({ ...DISK_MB, ...withDescription(description) });
export const Vcpus = (description?: string) => Type.Integer({ ...VCPUS, ...withDescription(description) });
/** Names to strings, as every interface sends environment variables, labels and metadata: what they may hold is checked once, by core (checks.ts). */
export const StringMap = Type.Record(Type.String(), Type.String());
export const UnixId = (description?: string) => Type.Integer({ ...UNIX_ID, ...withDescription(description) });

/** A request body: unknown fields are refused. */
export const Body = <T extends TProperties>(props: T, opts: { $id?: string; description?: string } = {}) => Type.Object(props, { ...opts, additionalProperties: false });
