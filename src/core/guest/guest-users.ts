// The guest's user accounts as its /etc/passwd says (read once per VM), and accounts added when
// an interface needs one the image lacks (E2B's `user`): /etc/passwd and /etc/group are edited
// through the agent, so no image needs useradd.
import type { Guest as GuestOps } from "./guest.js";

/** A user of the guest as its /etc/passwd names it. */
export interface GuestUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** The largest /etc/passwd or /etc/group read. */
const MAX_FILE = 4 * 1024 * 1024;
/** The first uid (and gid) given to an account we add. */
const FIRST_ID = 1000;

type Guest = Pick<GuestOps, "readFile" | "writeFile" | "stat" | "mkdir" | "exec" | "shell">;

/** Appends a line to a file's contents, with the newline the last line may lack. */
const appendLine = (b: Buffer, l: string) => Buffer.concat([b, Buffer.from(b.length && b[b.length - 1] !== 10 ? `\n${l}\n` : `${l}\n`)]);

/** A colon-separated account file as read: its bytes, and its entries split into fields. */
interface AccountFile {
  raw: Buffer;
  entries: string[][];
}

/** A user of a passwd file by name or uid. */
function userIn({ entries }: AccountFile, nameOrUid: string): GuestUser | null {
  const e = entries.find((f) => f[0] === nameOrUid) ?? entries.find((f) => f[2] === nameOrUid);
  return e && /^\d+$/.test(e[3] ?? "") ? { name: e[0], uid: Number(e[2]), gid: Number(e[3]), home: e[5] || "/" } : null;
}

export class GuestUsers {
  private passwdFile: Promise<AccountFile> | null = null;
  private groupFile: Promise<AccountFile> | null = null;
  private readonly ensuring = new Map<string, Promise<GuestUser>>();

  constructor(private readonly guest: Guest) {}

  /** An account file, read once per VM (again after we change it). */
  private read(path: string): Promise<AccountFile> {
    return this.guest
      .readFile(path, MAX_FILE)
      .catch(() => Buffer.alloc(0))
      .then((raw) => ({
        raw,
        entries: raw
          .toString("utf8")
          .split("\n")
          .map((l) => l.split(":"))
          .filter((f) => f.length >= 3 && f[0] && /^\d+$/.test(f[2])),
      }));
  }

  private passwd(): Promise<AccountFile> {
    this.passwdFile ??= this.read("/etc/passwd");
    this.passwdFile.catch(() => (this.passwdFile = null));
    return this.passwdFile;
  }

  private groups(): Promise<AccountFile> {
    this.groupFile ??= this.read("/etc/group");
    this.groupFile.catch(() => (this.groupFile = null));
    return this.groupFile;
  }

  /** A user by name or uid, or null when /etc/passwd has none. */
  async find(nameOrUid: string): Promise<GuestUser | null> {
    const hit = userIn(await this.passwd(), nameOrUid);
    if (hit) return hit;
    // An account made since the file was read (useradd in an exec) is found by reading it again.
    this.passwdFile = null;
    return userIn(await this.passwd(), nameOrUid);
  }

  /** A group's name by gid, or null when /etc/group has none. */
  async groupName(gid: number): Promise<string | null> {
    return (await this.groups()).entries.find((f) => Number(f[2]) === gid)?.[0] ?? null;
  }

  /** Makes sure the guest has this user, with this home directory owned by it (added once, however many ask at once). */
  ensure(name: string, home: string): Promise<GuestUser> {
    let p = this.ensuring.get(name);
    if (!p) {
      p = this.add(name, home);
      this.ensuring.set(name, p);
      p.catch(() => this.ensuring.delete(name));
    }
    return p;
  }

  private async add(name: string, home: string): Promise<GuestUser> {
    const known = await this.find(name);
    if (known) return known;
    const [passwd, groups] = [await this.passwd(), await this.groups()];
    const taken = new Set([...passwd.entries, ...groups.entries].map((f) => Number(f[2])));
    let id = FIRST_ID;
    while (taken.has(id)) id++;
    const shell = await this.guest.shell();
    await this.guest.writeFile("/etc/passwd", appendLine(passwd.raw, `${name}:x:${id}:${id}::${home}:${shell}`), { mode: 0o644 });
    await this.guest.writeFile("/etc/group", appendLine(groups.raw, `${name}:x:${id}:`), { mode: 0o644 });
    this.passwdFile = this.groupFile = null;
    await this.guest.mkdir(home, 0o755);
    // As root whoever the sandbox runs commands as by default: only root may give a directory away.
    const r = await this.guest.exec(["chown", `${id}:${id}`, home], { user: "root" }).catch(() => null);
    if (r?.exitCode !== 0) throw new Error(`could not give ${home} to user ${name}: ${r?.stderr.trim() || "the image has no chown"}`);
    return { name, uid: id, gid: id, home };
  }
}
