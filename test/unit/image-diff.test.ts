// The pure parts of commit: which paths a scan shows changed against an image's index, the
// tar headers of device nodes and hardlinks, and Docker's --change instructions.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { applyChange } from "../../src/cli/changes.js";
import { diffFiles, indexOf, type FileRecord } from "../../src/images/file-index.js";
import { childConfig } from "../../src/images/oci-build.js";
import { readTar } from "../../src/util/tar-read.js";
import { TAR_END, tarHeader } from "../../src/util/tar-write.js";

const rec = (path: string, ino: number, ctime: string, extra: Partial<FileRecord> = {}): FileRecord => ({
  path,
  type: "file",
  mode: 0o644,
  uid: 0,
  gid: 0,
  size: 1,
  mtime: 0,
  ino,
  nlink: 1,
  ctime,
  ...extra,
});

describe("diffFiles", () => {
  const image = [
    rec("/", 2, "1.0", { type: "dir" }),
    rec("/etc", 10, "1.0", { type: "dir" }),
    rec("/etc/a", 11, "1.0"),
    rec("/etc/b", 12, "1.0"),
    rec("/etc/hostname", 13, "1.0"),
    rec("/old", 20, "1.0", { type: "dir" }),
    rec("/old/x", 21, "1.0"),
    rec("/old/y", 22, "1.0"),
    rec("/proc", 30, "1.0", { type: "dir", mount: true }),
  ];
  const index = indexOf(image);

  it("finds nothing in an untouched copy", () => {
    assert.deepEqual(diffFiles(index, image), { changed: [], removed: [] });
  });

  it("counts a new change time or a new inode as a change, and a gone directory as one whiteout", () => {
    const now = [
      rec("/", 2, "1.0", { type: "dir" }),
      rec("/etc", 10, "5.1", { type: "dir" }),
      rec("/etc/a", 11, "5.000000001"), // written in place
      rec("/etc/b", 99, "5.2"), // replaced (a new inode)
      rec("/etc/hostname", 13, "6.0"), // the agent's own: never committed
      rec("/etc/new", 40, "5.3"),
      rec("/proc", 31, "7.0", { type: "dir", mount: true }), // another filesystem mounted there
    ];
    const d = diffFiles(index, now);
    assert.deepEqual(
      d.changed.map((r) => r.path),
      ["/etc", "/etc/a", "/etc/b", "/etc/new"],
    );
    assert.deepEqual(d.removed, ["/old"]);
  });

  it("with no image, gives everything but the agent's files, mount points as plain directories", () => {
    const d = diffFiles(null, image);
    assert.deepEqual(
      d.changed.map((r) => r.path),
      ["/etc", "/etc/a", "/etc/b", "/old", "/old/x", "/old/y", "/proc"],
    );
    const proc = d.changed.find((r) => r.path === "/proc")!;
    assert.equal(proc.type, "dir");
    assert.equal(proc.mode, 0o755);
  });
});

describe("layer tar headers", () => {
  it("writes devices with their numbers and hardlinks with their targets, as the reader reads them", async () => {
    const tar = Buffer.concat([
      tarHeader({ path: "dev/null", type: "char", mode: 0o666, devmajor: 1, devminor: 3 }),
      tarHeader({ path: "dev/sda", type: "block", mode: 0o660, devmajor: 8, devminor: 0 }),
      tarHeader({ path: "a/hard", type: "hardlink", mode: 0o644, linkname: "a/file" }),
      tarHeader({ path: "a/fifo", type: "fifo", mode: 0o600 }),
      TAR_END,
    ]);
    const seen = [];
    for await (const { entry } of readTar([tar])) seen.push([entry.path, entry.type, entry.devmajor, entry.devminor, entry.linkname]);
    assert.deepEqual(seen, [
      ["dev/null", "char", 1, 3, ""],
      ["dev/sda", "block", 8, 0, ""],
      ["a/hard", "hardlink", 0, 0, "a/file"],
      ["a/fifo", "fifo", 0, 0, ""],
    ]);
  });
});

describe("image config changes", () => {
  it("parses Docker's --change instructions and refuses the rest by name", () => {
    const c = {};
    applyChange(c, 'CMD ["app", "--port", "80"]');
    applyChange(c, "ENTRYPOINT /bin/start");
    applyChange(c, 'ENV A=1 B="two words"');
    applyChange(c, "ENV OLD style value");
    applyChange(c, "WORKDIR /srv");
    applyChange(c, "USER app");
    applyChange(c, "EXPOSE 80 53/udp");
    applyChange(c, "LABEL team=forge");
    assert.deepEqual(c, {
      cmd: ["app", "--port", "80"],
      entrypoint: ["/bin/sh", "-c", "/bin/start"],
      env: { A: "1", B: "two words", OLD: "style value" },
      workdir: "/srv",
      user: "app",
      expose: ["80", "53/udp"],
      labels: { team: "forge" },
    });
    assert.throws(() => applyChange({}, "RUN make"), /RUN cannot be changed by a commit/);
    assert.throws(() => applyChange({}, "CMD [1, 2]"), /JSON array of strings/);
    assert.throws(() => applyChange({}, "WORKDIR srv"), /absolute/);
    assert.throws(() => applyChange({}, "CMD"), /instruction and its value/);
  });

  it("adds a layer and its history to the parent's config; a new ENTRYPOINT drops the inherited CMD", () => {
    const parent = {
      architecture: "amd64",
      os: "linux",
      config: { Env: ["PATH=/bin", "A=old"], Cmd: ["sh"] },
      rootfs: { type: "layers", diff_ids: ["sha256:aa"] },
      history: [{ created_by: "base" }],
    };
    const child = childConfig(parent, { diffId: "sha256:bb", createdBy: "commit" }, { env: ["A=new", "B=1"], entrypoint: ["/start"] });
    assert.deepEqual(child.config.Env, ["PATH=/bin", "A=new", "B=1"]);
    assert.deepEqual(child.config.Entrypoint, ["/start"]);
    assert.equal(child.config.Cmd, null);
    assert.deepEqual(child.rootfs.diff_ids, ["sha256:aa", "sha256:bb"]);
    assert.equal(child.history.length, 2);
    assert.deepEqual(parent.rootfs.diff_ids, ["sha256:aa"], "the parent is not changed");
    const squashed = childConfig(parent, { diffId: "sha256:cc", createdBy: "squash" }, {}, true);
    assert.deepEqual(squashed.rootfs.diff_ids, ["sha256:cc"]);
  });
});
