// Option parsers shared by every command, so that one flag means one thing everywhere: sizes in
// MiB, durations as "30s" / "5m" / "1h30m" (a bare number is seconds), NAME=VALUE pairs.
import { InvalidArgumentError } from "commander";
import { parseDuration } from "../schemas/durations.js";

export function intOption(name: string, min: number, max: number) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`${name} must be an integer from ${min} to ${max}`);
    return n;
  };
}

/** A duration as the API takes it ("30s"); a bare number means seconds. */
export function durationOption(name: string) {
  return (v: string) => {
    const text = /^\d+$/.test(v) ? `${v}s` : v;
    try {
      parseDuration(text, name);
    } catch (e) {
      throw new InvalidArgumentError((e as Error).message);
    }
    return text;
  };
}

/** A --ttl: a duration as durationOption takes it, or 0 for none (the sandbox lives until removed). */
export function ttlOption(name: string) {
  const duration = durationOption(name);
  return (v: string) => (/^0+$/.test(v.trim()) ? "0" : duration(v));
}

/** NAME=VALUE, repeatable, into a map. */
export function pairOption(flag: string) {
  return (v: string, acc: Record<string, string> = {}) => {
    const i = v.indexOf("=");
    if (i <= 0) throw new InvalidArgumentError(`${flag} takes NAME=VALUE, got "${v}"`);
    return { ...acc, [v.slice(0, i)]: v.slice(i + 1) };
  };
}

/** A repeatable option collected into a list. */
export function listOption(v: string, acc: string[] = []) {
  return [...acc, v];
}

/** A repeatable option whose values may each be a comma-separated list ("--forward a,b"). */
export function commaListOption(v: string, acc: string[] = []) {
  return [
    ...acc,
    ...v
      .split(",")
      .map((k) => k.trim())
      .filter(Boolean),
  ];
}

/** A map that stayed empty is left out of a request. */
export function nonEmpty<T extends object>(m: T | undefined): T | undefined {
  return m && Object.keys(m).length ? m : undefined;
}

/** One --egress-header HOST:NAME=VALUE added to the egress rules collected so far. */
export function egressHeaderOption(v: string, acc: Record<string, { headers: Record<string, string> }> = {}) {
  const m = /^([^:=\s]+):([^=\s]+)=(.*)$/s.exec(v);
  if (!m) throw new InvalidArgumentError(`--egress-header takes HOST:NAME=VALUE, e.g. 'api.openai.com:Authorization=Bearer {{OPENAI_KEY}}', got "${v}"`);
  const [, host, name, value] = m;
  return { ...acc, [host]: { headers: { ...acc[host]?.headers, [name]: value } } };
}
