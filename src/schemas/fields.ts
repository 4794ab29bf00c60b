// The bounds of the numbers every interface takes for the same thing (REST, Custom HTTP, MCP, the
// config file, E2B's volume content): one definition each, so a value one interface accepts is
// one every other accepts and the sandbox can be made with. A VM needs 96 MiB to boot its kernel
// and agent: 64 does not boot (tried under TCG; what the kernel and initramfs take in memory does
// not depend on the accelerator).
import { Type } from "typebox";

export const MEMORY_MB = { minimum: 96, maximum: 65536 } as const;
export const DISK_MB = { minimum: 64, maximum: 1048576 } as const;
export const VCPUS = { minimum: 1, maximum: 64 } as const;
/** A Linux uid or gid: 32 bits, less the one that means "none". */
export const UNIX_ID = { minimum: 0, maximum: 4294967294 } as const;

const withDescription = (description?: string) => (description ? { description } : {});
export const MemoryMb = (description?: string) => Type.Integer({ ...MEMORY_MB, ...withDescription(description) });
export const DiskMb = (description?: string) => Type.Integer({ ...DISK_MB, ...withDescription(description) });
export const Vcpus = (description?: string) => Type.Integer({ ...VCPUS, ...withDescription(description) });
/** Names to strings, as every interface sends environment variables, labels and metadata: what they may hold is checked once, by core (checks.ts). */
export const StringMap = Type.Record(Type.String(), Type.String());
export const UnixId = (description?: string) => Type.Integer({ ...UNIX_ID, ...withDescription(description) });
