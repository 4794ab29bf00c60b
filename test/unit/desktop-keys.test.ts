// The key names a desktop takes (core/guest/desktop/keys.ts): the words clients send become X
// keysyms, and anything else is a 400 before a key is pressed.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { combination, keysym } from "../../src/core/guest/desktop/keys.js";
import { ForgevmError } from "../../src/http/errors.js";

const refused = (f: () => unknown, field: string) =>
  assert.throws(f, (e: unknown) => e instanceof ForgevmError && e.status === 400 && e.message.startsWith(`${field}: unknown key`));

describe("desktop key names", () => {
  it("takes clients' words in any case, letters, digits, punctuation, F-keys and X keysyms", () => {
    assert.equal(keysym("Enter"), "Return");
    assert.equal(keysym("ESC"), "Escape");
    assert.equal(keysym("pageDown"), "Page_Down");
    assert.equal(keysym("cmd"), "super");
    assert.equal(keysym("a"), "a");
    assert.equal(keysym("Z"), "Z");
    assert.equal(keysym("7"), "7");
    assert.equal(keysym(","), "comma");
    assert.equal(keysym(" "), "space");
    assert.equal(keysym("f12"), "F12");
    assert.equal(keysym("KP_Enter"), "KP_Enter");
  });

  it("refuses unknown names, F-keys past 24 and what would reach a shell", () => {
    refused(() => keysym("nosuchkey"), "key");
    refused(() => keysym("F25"), "key");
    refused(() => keysym("a;reboot"), "key");
    refused(() => keysym("return "), "key");
    refused(() => keysym("é"), "key");
    assert.throws(() => keysym(""), /key must name a key/);
  });

  it("checks every key of a combination, as a string or a list", () => {
    assert.equal(combination("ctrl+shift+t"), "ctrl+shift+t");
    assert.equal(combination(["Control", "a"]), "ctrl+a");
    assert.equal(combination("+"), "plus");
    refused(() => combination("ctrl+nosuchkey", "keys"), "keys");
    assert.throws(() => combination(Array(9).fill("a")), /1 to 8 keys/);
  });
});
