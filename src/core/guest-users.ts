// The guest's user accounts as its /etc/passwd says (read once per VM), and accounts added when
// an interface needs one the image lacks (E2B's `user`): /etc/passwd and /etc/group are edited
// through the agent, so no image needs useradd.
import type { Sandbox } from "./sandbox.js";

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

type Guest = Pick<Sandbox, "readFile" | "writeFile" | "stat" | "mkdir" | "exec">;

/** Appends a line to a file's contents, with the newline the last line may lack. */
const appendLine = (b: Buffer, l: string) => Buffer.concat([b, Buffer.from(b.length && b[b.length - 1] !== 10 ? `\n${l}\n` : `${l}\n`)]);

export class GuestUsers {
  private users: Promise<Map<string, GuestUser>> | null = null;
  private readonly ensuring = new Map<string, Promise<GuestUser>>();

  constructor(private readonly guest: Guest) {}

  private passwd(): Promise<Map<string, GuestUser>> {
    this.users ??= this.guest
      .readFile("/etc/passwd", MAX_FILE)
      .catch(() => Buffer.alloc(0))
      .then((b) => {
        const m = new Map<string, GuestUser>();
        for (const line of b.toString("utf8").split("\n")) {
          const [name, , uid, gid, , home] = line.split(":");
          if (name && /^\d+$/.test(uid ?? "") && /^\d+$/.test(gid ?? "")) m.set(name, { name, uid: Number(uid), gid: Number(gid), home: home || "/" });
        }
        return m;
      });
    this.users.catch(() => (this.users = null));
    return this.users;
  }

  /** A user by name or uid, or null when /etc/passwd has none. */
  async find(nameOrUid: string): Promise<GuestUser | null> {
    const users = await this.passwd();
    return users.get(nameOrUid) ?? [...users.values()].find((u) => String(u.uid) === nameOrUid) ?? null;
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
    const users = await this.passwd();
    const groups = await this.guest.readFile("/etc/group", MAX_FILE).catch(() => Buffer.alloc(0));
    const taken = new Set([...users.values()].map((u) => u.uid));
    const gids = new Set(
      groups
        .toString("utf8")
        .split("\n")
        .map((l) => Number(l.split(":")[2])),
    );
    let id = FIRST_ID;
    while (taken.has(id) || gids.has(id)) id++;
    const passwd = await this.guest.readFile("/etc/passwd", MAX_FILE).catch(() => Buffer.alloc(0));
    const shell = (await this.guest.stat("/bin/bash").catch(() => null)) ? "/bin/bash" : "/bin/sh";
    await this.guest.writeFile("/etc/passwd", appendLine(passwd, `${name}:x:${id}:${id}::${home}:${shell}`), { mode: 0o644 });
    await this.guest.writeFile("/etc/group", appendLine(groups, `${name}:x:${id}:`), { mode: 0o644 });
    await this.guest.mkdir(home, 0o755);
    const r = await this.guest.exec(["chown", `${id}:${id}`, home]).catch(() => null);
    if (r?.exitCode !== 0) throw new Error(`could not give ${home} to user ${name}: ${r?.stderr.trim() || "the image has no chown"}`);
    const user = { name, uid: id, gid: id, home };
    users.set(name, user);
    return user;
  }
}
