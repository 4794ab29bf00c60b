// `forgevm cluster nodes` and `forgevm cluster keys create|ls|rm`: a cluster seen through a front
// (FORGEVM_URL pointing at one); keys are managed with the operator's key.
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { emit, mib, table } from "../output.js";

export function clusterCommands(program: Command, cli: Cli): void {
  const cluster = program.command("cluster").description("a cluster of nodes, through a front (see docs/scale-out.md)");

  cluster
    .command("nodes")
    .description("the nodes: state, heartbeat age, memory, vCPUs, sandboxes")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const nodes = await (await cli.client()).cluster.nodes();
      emit(o.json, nodes, () =>
        table(
          ["NODE", "STATE", "HEARTBEAT", "FREE MEMORY", "VCPUS GIVEN", "SANDBOXES", "URL"],
          nodes.map((n) => [
            n.id,
            n.state,
            `${(n.heartbeat_age_ms / 1000).toFixed(1)}s ago`,
            `${mib(n.free_memory_mb * 1048576)} of ${mib(n.memory_mb * 1048576)}`,
            `${n.used_vcpus} of ${n.vcpus}`,
            n.running,
            n.url,
          ]),
          "no nodes: start one with forgevm serve --role node",
        ),
      );
    });

  const keys = cluster.command("keys").description("the cluster's API keys (made and revoked with the operator's key)");
  keys
    .command("create")
    .description("make a key; it is printed this once")
    .argument("<name>", "who the key is for")
    .option("--json", "print JSON")
    .action(async (name: string, o: { json?: boolean }) => {
      const k = await (await cli.client()).cluster.keys.create(name);
      emit(o.json, k, () => {
        console.log(k.key);
        console.error(`(key ${k.id} for ${k.name}: shown this once; revoke it with forgevm cluster keys rm ${k.id})`);
      });
    });
  keys
    .command("ls")
    .alias("list")
    .description("list the keys (never the keys themselves)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const list = await (await cli.client()).cluster.keys.list();
      emit(o.json, list, () =>
        table(
          ["ID", "NAME", "CREATED", "REVOKED"],
          list.map((k) => [k.id, k.name, k.created_at, k.revoked_at ?? "-"]),
          "no keys",
        ),
      );
    });
  keys
    .command("rm")
    .alias("revoke")
    .description("revoke a key: every front refuses it within seconds")
    .argument("<id>", "the key's id (from forgevm cluster keys ls)")
    .action(async (id: string) => {
      await (await cli.client()).cluster.keys.revoke(id);
      console.log(`revoked ${id}`);
    });
}
