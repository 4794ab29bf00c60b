// The Dockerfile parser and .dockerignore matcher: continuations, comments, forms, build
// arguments and substitution, stages, errors that name their line; Docker's ignore rules.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseDockerfile, substitute, words } from "../../src/images/dockerfile.js";
import { DockerIgnore } from "../../src/util/dockerignore.js";

describe("parseDockerfile", () => {
  it("reads stages, forms, continuations and build arguments", () => {
    const df = parseDockerfile(
      [
        "# comment",
        "ARG BASE=alpine:3",
        // biome-ignore lint/suspicious/noTemplateCurlyInString: Dockerfile syntax, not a template
        "FROM ${BASE} AS build",
        "ARG V=1",
        'ENV A=$V B="two words"',
        "RUN echo a \\",
        "  # a comment inside a continuation",
        "  && echo b",
        'CMD ["app", "--x"]',
        "COPY --from=build --chown=app:app --chmod=755 a b /dst/",
        "FROM build",
        "EXPOSE 80 53/udp",
        'SHELL ["/bin/bash", "-c"]',
      ].join("\n"),
      { V: "9" },
    );
    assert.equal(df.stages.length, 2);
    assert.equal(df.stages[0].from, "alpine:3");
    assert.equal(df.stages[0].name, "build");
    assert.equal(df.stages[1].from, "build");
    const [arg, env, run, cmd, copy] = df.stages[0].steps;
    assert.deepEqual(arg, { op: "ARG", line: 4, text: "ARG V=1", name: "V", value: "9" });
    assert.deepEqual((env as { pairs: unknown }).pairs, [
      ["A", "9"],
      ["B", "two words"],
    ]);
    assert.equal(run.line, 6);
    assert.equal((run as { command: string }).command, "echo a    && echo b");
    assert.deepEqual((cmd as { argv: string[] }).argv, ["app", "--x"]);
    assert.deepEqual({ ...copy, text: undefined }, { op: "COPY", line: 10, text: undefined, sources: ["a", "b"], dest: "/dst/", from: "build", chown: "app:app", chmod: 0o755 });
    assert.deepEqual((df.stages[1].steps[0] as { ports: string[] }).ports, ["80/tcp", "53/udp"]);
    // What ordinary Dockerfiles carry besides: recorded in the image as Docker records it, or kept out with a warning.
    const extra = parseDockerfile(
      [
        "FROM a",
        "MAINTAINER Jo <jo@example.com>",
        'VOLUME ["/data", "/logs"]',
        "STOPSIGNAL sigint",
        "HEALTHCHECK --interval=1m30s --retries=3 CMD curl -f http://localhost/",
        "ONBUILD RUN make",
      ].join("\n"),
    ).stages[0].steps;
    assert.deepEqual((extra[0] as { pairs: unknown }).pairs, [["maintainer", "Jo <jo@example.com>"]]);
    assert.deepEqual((extra[1] as { paths: string[] }).paths, ["/data", "/logs"]);
    assert.equal((extra[2] as { signal: string }).signal, "SIGINT");
    assert.deepEqual((extra[3] as { healthcheck: unknown }).healthcheck, { Test: ["CMD-SHELL", "curl -f http://localhost/"], Interval: 90e9, Retries: 3 });
    assert.equal(extra[4].op, "IGNORED");
    // Flags, then the JSON form (names with spaces).
    const json = parseDockerfile('FROM a\nCOPY --chown=u --chmod=644 ["my file", "/dst dir/"]').stages[0].steps[0];
    assert.deepEqual({ ...json, text: undefined }, { op: "COPY", line: 2, text: undefined, sources: ["my file"], dest: "/dst dir/", chown: "u", chmod: 0o644 });
  });

  it("names the line of what it cannot build", () => {
    assert.throws(() => parseDockerfile("FROM a\n\nFROBNICATE x"), /line 3: FROBNICATE is not supported/);
    assert.throws(() => parseDockerfile("FROM a\nHEALTHCHECK --interval=soon CMD true"), /line 2: HEALTHCHECK --interval: "soon" is not a duration/);
    assert.throws(() => parseDockerfile("FROM a\nHEALTHCHECK true"), /line 2: HEALTHCHECK needs CMD <command> or NONE/);
    assert.throws(() => parseDockerfile("FROM a\nVOLUME data"), /line 2: VOLUME takes absolute paths/);
    assert.throws(() => parseDockerfile("RUN x"), /line 1: RUN before the first FROM/);
    assert.throws(() => parseDockerfile("# nothing"), /no FROM/);
    assert.throws(() => parseDockerfile("FROM a\nCOPY --link=true --weird=1 a b"), /line 2: COPY --weird is not supported/);
    assert.throws(() => parseDockerfile("FROM a\nADD https://example.com/x /x"), /line 2: ADD from a URL/);
    assert.throws(() => parseDockerfile("FROM a\nEXPOSE http"), /line 2: EXPOSE: "http"/);
    assert.throws(() => parseDockerfile("FROM a AS x\nFROM b AS x"), /line 2: a stage is named "x" already/);
  });

  it("substitutes like Docker and splits words like a shell", () => {
    const v = new Map([["A", "1"]]);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: Dockerfile syntax, not a template
    assert.equal(substitute("$A ${A} ${B:-d} ${A:+set} ${B:+no} \\$A", v), "1 1 d set  $A");
    assert.deepEqual(words(`a "b c" 'd e' f\\ g`), ["a", "b c", "d e", "f g"]);
  });
});

describe("DockerIgnore", () => {
  it("follows Docker's rules: last match wins, directories take their contents, ** spans directories", () => {
    const ig = new DockerIgnore("# c\nnode_modules\n*.log\n!keep.log\n**/tmp\n/build/\n");
    assert.equal(ig.ignores("node_modules"), true);
    assert.equal(ig.ignores("node_modules/a/b.js"), true);
    assert.equal(ig.ignores("x.log"), true);
    assert.equal(ig.ignores("keep.log"), false);
    assert.equal(ig.ignores("src/x.log"), false, "* does not cross a directory");
    assert.equal(ig.ignores("a/b/tmp/f"), true);
    assert.equal(ig.ignores("build/out"), true);
    assert.equal(ig.ignores("src/app.js"), false);
  });
});
