// ssh into a sandbox (docs/ssh.md). The connection reaches port 22 of the guest's loopback
// through the agent's tunnel, so no network device or published port is needed. A guest where
// something already answers on port 22 (an image's own sshd, a system image's) keeps it: the
// caller's keys go into the account's ~/.ssh/authorized_keys and its host keys are the image's.
// Elsewhere the server brings its own sshd (images/ssh-bundle.ts) into GUEST_SSH_DIR, with a host
// key made for the sandbox, and starts it listening on the guest's loopback only.
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { badRequest, ForgevmError } from "../../http/errors.js";
import { GUEST_SSH_DIR, readSshBundle, type SshBundle } from "../../images/ssh-bundle.js";
import type { GuestSession } from "./session.js";
import type { Sandbox } from "./sandbox.js";

export const SSH_PORT = 22;
/** The key types an authorized_keys line may start with. */
const KEY_LINE = /^(ssh-ed25519|ssh-rsa|ssh-dss|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\n\r]*)?$/;
const MAX_KEYS = 32;

/** What a client needs to log in: the account, the host keys to pin, and the guest port. */
export interface SshAccess {
  user: string;
  host_keys: string[];
  port: number;
  /** Whose sshd answers: ForgeVM's, or the image's own. */
  server: "forgevm" | "image";
}

/** Public keys as authorized_keys lines, or a 400 naming the one that is not. */
export function checkPublicKeys(keys: unknown): string[] {
  if (!Array.isArray(keys) || keys.length === 0) throw badRequest("public_keys: give at least one public key (a line of an id_*.pub file)");
  if (keys.length > MAX_KEYS) throw badRequest(`public_keys: at most ${MAX_KEYS} keys`);
  return keys.map((k, i) => {
    const line = typeof k === "string" ? k.trim() : "";
    if (!KEY_LINE.test(line) || line.length > 16_384) throw badRequest(`public_keys[${i}]: not an OpenSSH public key line (e.g. "ssh-ed25519 AAAA… me@host")`);
    return line;
  });
}

/**
 * Makes the sandbox answer ssh for `session`'s account with `keys`: the sshd there is used, or
 * ours is brought in and started. Safe to call again and again: keys are added once.
 */
export async function prepareSsh(session: GuestSession, keys: string[], bundleDir: string): Promise<SshAccess> {
  const sb = session.sandbox;
  const user = session.user;
  // The agent's file calls, not a script: every process a script starts costs ~50 ms under TCG.
  const text = (path: string) =>
    sb.readFile(path, 1 << 20).then(
      (b) => b.toString(),
      () => null,
    );
  if (!/^[A-Za-z0-9._][A-Za-z0-9._-]*\$?$/.test(user.name)) throw badRequest(`ssh: user name "${user.name}" is not one sshd takes`);
  if (!(await executable(sb, "/bin/sh"))) throw badRequest(`ssh: sandbox ${sb.id}'s image has no shell (/bin/sh), which an ssh session runs in`);
  const loginShell = (await text("/etc/passwd"))
    ?.split("\n")
    .map((l) => l.split(":"))
    .find((f) => f[0] === user.name)?.[6];
  if (loginShell && !(await executable(sb, loginShell)))
    throw badRequest(`ssh: user ${user.name} of sandbox ${sb.id} has no login shell that exists in the guest (${loginShell}): give it one, or ssh as another user`);
  const pid = Number((await text(`${GUEST_SSH_DIR}/sshd.pid`))?.trim());
  const own = pid > 0 && (await text(`/proc/${pid}/comm`))?.trim() === "sshd";
  const answering = await portAnswers(sb, SSH_PORT);
  if (answering && !own) {
    await script(sb, USER_KEYS, [user.name, user.home, String(user.uid), String(user.gid), keys.join("\n")]);
    const hostKeys = (await script(sb, IMAGE_HOST_KEYS, [])).split("\n").filter((l) => KEY_LINE.test(l));
    if (!hostKeys.length) throw new ForgevmError("CONFLICT", `ssh: sandbox ${sb.id}'s own sshd answers on port 22, but it has no public host key under /etc/ssh to pin`);
    return { user: user.name, host_keys: hostKeys, port: SSH_PORT, server: "image" };
  }
  if (!answering) {
    const bundle = await readSshBundle(bundleDir);
    if (!bundle) throw new ForgevmError("UNAVAILABLE", `ssh: the ssh server for guests is not built at ${bundleDir}: run forgevm setup`);
    if ((await text(`${GUEST_SSH_DIR}/bundle.digest`))?.trim() !== bundle.digest) await upload(sb, bundleDir, bundle);
    if (!(await sb.stat(`${GUEST_SSH_DIR}/host_ed25519_key`).catch(() => null))) await hostKey(sb);
    await sb.writeFile(`${GUEST_SSH_DIR}/sshd_config`, SSHD_CONFIG, { mode: 0o644 });
    await script(sb, START, []);
  }
  const file = `${GUEST_SSH_DIR}/authorized_keys/${user.name}`;
  const had = (await text(file)) ?? "";
  const missing = keys.filter((k) => !had.split("\n").includes(k));
  // Root's file, readable by all: sshd's strict modes accept it for any account.
  if (missing.length) await sb.mkdir(`${GUEST_SSH_DIR}/authorized_keys`, 0o755);
  if (missing.length) await sb.writeFile(file, `${had}${had && !had.endsWith("\n") ? "\n" : ""}${missing.join("\n")}\n`, { mode: 0o644 });
  if (/^[^:]+:(!|!!|!\*):/m.test((await text("/etc/shadow"))?.split("\n").find((l) => l.startsWith(`${user.name}:`)) ?? "")) await script(sb, UNLOCK, [user.name]);
  const pub = (await text(`${GUEST_SSH_DIR}/host_ed25519_key.pub`))?.split("\n")[0].trim() ?? "";
  if (!KEY_LINE.test(pub)) throw new ForgevmError("INTERNAL_ERROR", `ssh: sandbox ${sb.id}'s host key is not an OpenSSH public key`);
  return { user: user.name, host_keys: [pub], port: SSH_PORT, server: "forgevm" };
}

/** Whether `path` is a program (a link is taken as one: its target is the guest's to resolve). */
async function executable(sb: Sandbox, path: string): Promise<boolean> {
  const st = await sb.stat(path).catch(() => null);
  return !!st && (st.type === "symlink" || (st.type === "file" && (st.mode & 0o111) !== 0));
}

/** Whether something accepts connections on the guest's loopback at `port`. */
async function portAnswers(sb: Sandbox, port: number): Promise<boolean> {
  const t = sb.vm.guest.connect({ addr: "127.0.0.1", port });
  try {
    await t.connected;
    return true;
  } catch {
    return false;
  } finally {
    t.close();
  }
}

/** Runs a shell script as root in the guest with `args` as $1…; its stdout, or a 500 with its stderr. */
async function script(sb: Sandbox, body: string, args: string[]): Promise<string> {
  const r = await sb.exec(["/bin/sh", "-c", body, "forgevm-ssh", ...args], { user: "root", timeoutMs: 30_000 });
  if (r.exitCode !== 0) throw new ForgevmError("INTERNAL_ERROR", `ssh: preparing sandbox ${sb.id} failed: ${r.stderr.toString().trim().slice(-500) || `exit ${r.exitCode}`}`);
  return r.stdout.toString().trim();
}

/** Copies the bundle's files in, then its digest, so that an interrupted copy is done again. */
async function upload(sb: Sandbox, dir: string, bundle: SshBundle): Promise<void> {
  for (const sub of ["lib", "sbin", "bin", "authorized_keys"]) await sb.mkdir(`${GUEST_SSH_DIR}/${sub}`, 0o755);
  for (const f of bundle.files) await sb.writeFile(`${GUEST_SSH_DIR}/${f.path}`, await readFile(join(dir, f.path)), { mode: f.mode });
  await sb.writeFile(`${GUEST_SSH_DIR}/bundle.digest`, `${bundle.digest}\n`, { mode: 0o644 });
}

/** A host key made for this sandbox (on the host, whose ssh-keygen is there for sure). */
async function hostKey(sb: Sandbox): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), "forgevm-hostkey-"));
  try {
    const file = join(work, "key");
    await promisify(execFile)("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", `forgevm-${sb.id}`, "-f", file]);
    await sb.writeFile(`${GUEST_SSH_DIR}/host_ed25519_key`, await readFile(file), { mode: 0o600 });
    await sb.writeFile(`${GUEST_SSH_DIR}/host_ed25519_key.pub`, await readFile(`${file}.pub`), { mode: 0o644 });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

const D = GUEST_SSH_DIR;

/** Adds keys ($5) to $1's ~/.ssh/authorized_keys ($2 home, $3:$4 owner), each once. */
const USER_KEYS = `
set -e
mkdir -p "$2/.ssh"; chmod 700 "$2/.ssh"; f="$2/.ssh/authorized_keys"; touch "$f"; chmod 600 "$f"
printf '%s\\n' "$5" | while IFS= read -r k; do grep -qxF "$k" "$f" || printf '%s\\n' "$k" >> "$f"; done
chown "$3:$4" "$2/.ssh" "$f"
`;

/**
 * The image's public host keys. A system image's sshd makes its keys when it first starts and
 * marks them with the machine's id (setup/base-image.ts); a sandbox restored from the image's
 * base snapshot has another id, so its keys are made again here, before they are pinned, and
 * no two sandboxes share them. Only an ed25519 key is made: an RSA key takes seconds to tens of
 * seconds under TCG. sshd is restarted to serve it (its sessions stay).
 */
const IMAGE_HOST_KEYS = `m=/etc/ssh/forgevm-host-keys
if [ -f $m ] && [ "$(cat $m)" != "$(cat /etc/machine-id)" ]; then
  rm -f /etc/ssh/ssh_host_*; ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key && cat /etc/machine-id > $m && systemctl restart ssh.service >/dev/null 2>&1
fi
cat /etc/ssh/ssh_host_ed25519_key.pub /etc/ssh/ssh_host_ecdsa_key.pub /etc/ssh/ssh_host_rsa_key.pub 2>/dev/null; true`;

/**
 * Without PAM, OpenSSH refuses key logins to an account ($1) whose password field is only a lock
 * ("!", as useradd leaves it): that becomes "*", which allows no password either.
 */
const UNLOCK = `
set -e
awk -F: -v u="$1" 'BEGIN { OFS = ":" } $1 == u && ($2 == "!" || $2 == "!!" || $2 == "!*") { $2 = "*" } { print }' /etc/shadow > /etc/shadow.forgevm
cat /etc/shadow.forgevm > /etc/shadow
rm /etc/shadow.forgevm
`;

/** Starts our sshd (it detaches once it listens). OpenSSH needs its privilege-separation user and directory. */
const START = `
set -e
grep -q '^sshd:' /etc/passwd || echo 'sshd:x:64022:65534:ForgeVM ssh privilege separation:/run/sshd:/bin/false' >> /etc/passwd
mkdir -p /run/sshd; chmod 755 /run/sshd
chmod 755 /opt /opt/forgevm ${D} 2>/dev/null || true
rm -f ${D}/sshd.pid
${D}/sbin/sshd -f ${D}/sshd_config -E ${D}/sshd.log
`;

/** Our sshd: keys only, on the guest's loopback (the tunnel's end), with sftp inside it. */
const SSHD_CONFIG = `# Written by ForgeVM for \`forgevm ssh\` (docs/ssh.md); rewritten whenever it starts this sshd.
Port 22
ListenAddress 127.0.0.1
HostKey ${D}/host_ed25519_key
PidFile ${D}/sshd.pid
AuthorizedKeysFile ${D}/authorized_keys/%u .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
AllowAgentForwarding yes
Subsystem sftp internal-sftp
SetEnv PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${D}/bin
`;
