// What the host answers a guest's git credential helper (core/guest/git-credentials.ts), with a
// recording stand-in for the host's `git credential fill` (git-forward.test.ts uses the real one
// in a real VM): only `get`, only http(s), only hosts the egress allows, only the username and
// password back, and only the attributes that name the credential passed on.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { answerGitCredential } from "../../src/core/guest/git-credentials.js";

const allowOnly = (name: string, port: number) => (host: string, p: number) => host === name && p === port;

function recordingFill(reply: string) {
  const asked: string[] = [];
  const fill = async (request: string) => {
    asked.push(request);
    return reply;
  };
  return { asked, fill };
}

describe("git credential answers", () => {
  it("gives the username and password for an allowed https host, and passes on only what names the credential", async () => {
    const host = recordingFill("protocol=https\nhost=git.example.com\nusername=alice\npassword=tok\nquit=0\n");
    const r = await answerGitCredential(
      "action=get\nprotocol=https\nhost=Git.Example.com\npath=org/repo.git\nwwwauth[]=Basic realm=x\ncapability[]=authtype\n\n",
      allowOnly("git.example.com", 443),
      host.fill,
    );
    assert.deepEqual(r, { answer: "protocol=https\nhost=Git.Example.com\nusername=alice\npassword=tok\n" });
    assert.deepEqual(host.asked, ["protocol=https\nhost=Git.Example.com\npath=org/repo.git\n\n"]);
  });

  it("takes the port from the host, and the protocol's own port otherwise", async () => {
    const host = recordingFill("username=a\npassword=b\n");
    assert.equal((await answerGitCredential("action=get\nprotocol=http\nhost=h.test:8080\n", allowOnly("h.test", 8080), host.fill)).refused, undefined);
    assert.match((await answerGitCredential("action=get\nprotocol=http\nhost=h.test\n", allowOnly("h.test", 8080), host.fill)).refused ?? "", /h\.test:80 is not a destination/);
  });

  it("answers nothing, and asks the host nothing, for store and erase, other protocols, bad hosts, hosts not allowed, or a malformed request", async () => {
    const host = recordingFill("username=a\npassword=b\n");
    const yes = () => true;
    const cases: [string, RegExp | null][] = [
      ["action=store\nprotocol=https\nhost=h\nusername=eve\npassword=planted\n", null],
      ["action=erase\nprotocol=https\nhost=h\n", null],
      ["action=get\nprotocol=ssh\nhost=h\n", /only http and https/],
      ["action=get\nprotocol=https\nhost=h/../x\n", /is not a host name/],
      ["action=get\nprotocol=https\nhost=\n", /is not a host name/],
      ["action=get\nprotocol=https\nno equals sign\n", /not git's key=value lines/],
    ];
    for (const [request, why] of cases) {
      const r = await answerGitCredential(request, yes, host.fill);
      assert.equal(r.answer, "", request);
      if (why) assert.match(r.refused ?? "", why, request);
    }
    const notAllowed = await answerGitCredential("action=get\nprotocol=https\nhost=elsewhere.test\n", allowOnly("h", 443), host.fill);
    assert.equal(notAllowed.answer, "");
    assert.deepEqual(host.asked, [], "the host's helpers were never asked");
  });

  it("says so when the host's helpers know nothing", async () => {
    const r = await answerGitCredential(
      "action=get\nprotocol=https\nhost=h\n",
      () => true,
      async () => "",
    );
    assert.deepEqual(r, { answer: "", refused: "the host's git credential helpers know no credential for h" });
  });
});
