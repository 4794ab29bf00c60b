// The bounds of the numbers every interface takes for the same thing (REST, Custom HTTP, MCP, the
// config file, E2B's volume content, the CLI's own checks): one definition each, so a value one
// interface accepts is one every other accepts and the sandbox can be made with. Plain numbers
// with no schema library, so that the CLI, which checks its flags against them, starts without
// loading one (TypeBox's modules take ~190 ms of a CLI call's start). A VM needs 96 MiB to boot
// its kernel and agent: 64 does not boot (tried under TCG; what the kernel and initramfs take in
// memory does not depend on the accelerator).

export const MEMORY_MB = { minimum: 96, maximum: 65536 } as const;
export const DISK_MB = { minimum: 64, maximum: 1048576 } as const;
export const VCPUS = { minimum: 1, maximum: 64 } as const;
/** A Linux uid or gid: 32 bits, less the one that means "none". */
export const UNIX_ID = { minimum: 0, maximum: 4294967294 } as const;

/** What a sandbox may have forwarded from the host (core/guest/forwards.ts): one list for every interface. */
export const FORWARD_KINDS = ["ssh-agent", "git"] as const;
