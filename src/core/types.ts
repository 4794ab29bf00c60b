// The shapes core hands to its interfaces: records of sandboxes, snapshots, templates and
// events, and what the guest reports about files and processes. Interfaces import them from
// here, never from the stores or the agent client themselves.
export type { DirChange, DirEntry, DirWatch, ExecResult, FileStat } from "../agent-client/index.js";
export type { AuditEntry, AuditQuery } from "../store/audit.js";
export type { EventRow } from "../store/events.js";
export type { MainRecord, NetworkRecord, SandboxRow, SandboxState } from "../store/sandboxes.js";
export type { SecretInfo } from "../store/secrets.js";
export type { SnapshotRow } from "../store/snapshots.js";
export type { TemplateBody, TemplateRow } from "../store/templates.js";
export type { CodeContextInfo, CodeError, CodeEvent, CodeLanguage, CodeResult, Execution } from "./guest/code/types.js";
