// The data directory across versions: a database left at any earlier schema version, with a
// sandbox in it, opens with the current code (migrated, the row kept); a database from a newer
// ForgeVM is refused rather than written, so going back a version (`forgevm upgrade`'s rollback,
// or a downgrade) never corrupts it. The CHANGELOG has an entry for the package's version.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import Database from "better-sqlite3";
import { MIGRATIONS, openDb } from "../../src/store/db.js";
import { INSTALL_ROOT, PACKAGE } from "../../src/setup/install.js";

const dir = await mkdtemp(join(tmpdir(), "fvt-migrations-"));
after(() => rm(dir, { recursive: true, force: true }));

/** A database as the version with `applied` migrations left it, holding one running sandbox. */
function databaseAt(applied: number): string {
  const path = join(dir, `at-${applied}.db`);
  const db = new Database(path);
  for (let v = 0; v < applied; v++) db.exec(MIGRATIONS[v]);
  db.pragma(`user_version = ${applied}`);
  db.prepare(
    "INSERT INTO sandboxes (id, state, provider, image, memory_mb, vcpus, disk_mb, created_at, expires_at) VALUES ('sb-old', 'running', 'qemu', 'forgevm/debian:bookworm', 512, 1, 2048, '2026-01-01T00:00:00Z', '2026-01-01T01:00:00Z')",
  ).run();
  db.close();
  return path;
}

describe("the database across versions", () => {
  it("opens a database from every earlier schema version, migrated, with its rows", () => {
    for (let applied = 1; applied < MIGRATIONS.length; applied++) {
      const db = openDb(databaseAt(applied));
      try {
        assert.equal(db.pragma("user_version", { simple: true }), MIGRATIONS.length, `from version ${applied}`);
        const row = db.prepare("SELECT * FROM sandboxes WHERE id = 'sb-old'").get() as Record<string, unknown>;
        assert.equal(row.state, "running", `the sandbox row of version ${applied} is kept`);
        assert.ok("forward" in row, "the newest column is there");
      } finally {
        db.close();
      }
    }
  });

  it("refuses a database from a newer ForgeVM, and leaves it as it was", () => {
    const path = databaseAt(MIGRATIONS.length);
    const db = new Database(path);
    db.pragma(`user_version = ${MIGRATIONS.length + 1}`);
    db.close();
    assert.throws(() => openDb(path), /from a newer ForgeVM \(schema \d+; this one knows \d+\)/);
    const again = new Database(path);
    assert.equal(again.pragma("user_version", { simple: true }), MIGRATIONS.length + 1);
    again.close();
  });

  it("the changelog has an entry for this version", async () => {
    const log = await readFile(join(INSTALL_ROOT, "CHANGELOG.md"), "utf8");
    assert.match(log, new RegExp(`^## ${PACKAGE.version.replace(/\./g, "\\.")} \\(\\d{4}-\\d{2}-\\d{2}\\)$`, "m"));
  });
});
