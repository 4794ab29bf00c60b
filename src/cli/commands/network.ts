// A sandbox's network: egress decisions, the allowlist, published ports.
import { type Command, InvalidArgumentError } from "commander";
import type { Cli } from "../context.js";
import { intOption, listOption } from "../options.js";
import { emit, table } from "../output.js";

export function networkCommands(program: Command, cli: Cli): void {
  program
    .command("egress")
    .description("show a sandbox's egress decisions (allowed and refused requests through its proxy)")
    .argument("<id>", "sandbox id")
    .option("-n, --lines <n>", "how many of the latest", intOption("--lines", 1, 100000), 100)
    .option("--json", "print JSON lines")
    .action(async (id: string, o: { lines: number; json?: boolean }) => {
      const list = await (await (await cli.client()).get(id)).egress(o.lines);
      if (o.json) {
        for (const e of list) console.log(JSON.stringify(e));
        return;
      }
      if (!list.length) {
        console.log("no egress requests");
        return;
      }
      for (const e of list) console.log([e.ts, e.decision.toUpperCase(), e.method, `${e.host}:${e.port}`, e.decision === "allow" ? (e.address ?? "") : e.reason].join("\t"));
    });

  program
    .command("allow")
    .description("show or change a running sandbox's egress allowlist (takes effect on its next request)")
    .argument("<id>", "sandbox id")
    .argument("[entries...]", "new allowlist: hosts, *.domains, IPs/CIDRs, with :port, and @presets")
    .option("--add", "add the entries to the current list instead of replacing it")
    .option("--clear", "remove every entry (the sandbox can then reach nothing)")
    .option("--json", "print JSON")
    .action(async (id: string, entries: string[], o: { add?: boolean; clear?: boolean; json?: boolean }) => {
      const sb = await (await cli.client()).get(id);
      let net = await sb.network();
      if (entries.length || o.clear) net = await sb.setAllowlist(o.clear ? [] : o.add ? [...net.allow, ...entries] : entries);
      emit(o.json, net, () => {
        console.log(`network ${net.mode}${net.proxy ? ` (proxy ${net.proxy})` : ""}`);
        for (const a of net.allow) console.log(`  ${a}`);
      });
    });

  program
    .command("network")
    .description("show or change a running sandbox's egress (takes effect on its next request): mode, allowlist, deny list")
    .argument("<id>", "sandbox id")
    .option("--mode <mode>", 'none, allowlist, or full (only for a sandbox made with "full")')
    .option("--allow <entry>", "the new allowlist (repeatable): hosts, *.domains, IPs/CIDRs, with :port, and @presets", listOption)
    .option("--deny <cidr>", "open egress to every public destination but these addresses or CIDR networks; --deny '' for none (repeatable)", listOption)
    .option("--strict", "only the allowlist is reachable (drops the deny list)")
    .option("--json", "print JSON")
    .action(async (id: string, o: { mode?: string; allow?: string[]; deny?: string[]; strict?: boolean; json?: boolean }) => {
      if (o.strict && o.deny) throw new InvalidArgumentError("--strict and --deny contradict each other: give one");
      const sb = await (await cli.client()).get(id);
      const change = {
        ...(o.mode ? { mode: o.mode as "none" | "allowlist" | "full" } : {}),
        ...(o.allow ? { allow: o.allow } : {}),
        ...(o.deny ? { deny: o.deny.filter((d) => d !== "") } : {}),
        ...(o.strict ? { deny: null } : {}),
      };
      const net = Object.keys(change).length ? await sb.updateNetwork(change) : await sb.network();
      emit(o.json, net, () => {
        console.log(`network ${net.mode}${net.proxy ? ` (proxy ${net.proxy})` : ""}`);
        for (const a of net.allow) console.log(`  allow ${a}`);
        if (net.mode === "allowlist") console.log(net.deny ? `  open egress${net.deny.length ? ` but ${net.deny.join(", ")}` : ""}` : "  nothing else");
      });
    });

  program
    .command("publish")
    .description("publish a port of a running sandbox on the host (127.0.0.1 unless an address is given)")
    .argument("<id>", "sandbox id")
    .argument("<spec>", "[ADDRESS:]HOST:GUEST, e.g. 8080:80; host port 0 picks a free one")
    .option("--json", "print JSON")
    .action(async (id: string, spec: string, o: { json?: boolean }) => {
      const m = await (await (await cli.client()).get(id)).publishPort(spec);
      emit(o.json, m, () => console.log(`${m.host_ip}:${m.host_port} -> ${m.guest_port}`));
    });

  program
    .command("unpublish")
    .description("stop publishing a host port of a sandbox")
    .argument("<id>", "sandbox id")
    .argument("<host-port>", "the host port", intOption("host-port", 1, 65535))
    .option("--json", "print JSON")
    .action(async (id: string, port: number, o: { json?: boolean }) => {
      await (await (await cli.client()).get(id)).unpublishPort(port);
      emit(o.json, { unpublished: port }, () => console.log(`unpublished ${port}`));
    });

  program
    .command("ports")
    .description("list a sandbox's published ports")
    .argument("<id>", "sandbox id")
    .option("--json", "print JSON")
    .action(async (id: string, o: { json?: boolean }) => {
      const net = await (await (await cli.client()).get(id)).network();
      emit(o.json, net.ports, () =>
        table(
          ["HOST", "GUEST"],
          net.ports.map((m) => [`${m.host_ip}:${m.host_port}`, m.guest_port]),
          "no published ports",
        ),
      );
    });
}
