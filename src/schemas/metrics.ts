// Schemas of the metrics routes (routes/metrics.ts): one sample, a series, the live table.
import { Type } from "typebox";

const n = (description: string) => Type.Optional(Type.Union([Type.Number(), Type.Null()], { description }));

const sampleFields = {
  ts: Type.Integer({ description: "milliseconds since the epoch (the start of the bucket)" }),
  cpu_pct: n("host side: CPU of the sandbox's VMM, percent of one host core"),
  rss_bytes: n("host side: resident memory of the VMM"),
  pss_bytes: n("host side: proportional memory of the VMM (pages shared with other VMs counted in shares)"),
  disk_read_bps: n("host side: bytes per second the VMM read from host disks"),
  disk_write_bps: n("host side: bytes per second the VMM wrote to host disks"),
  guest_cpu_pct: n("guest side: CPU in use, percent of all its vCPUs (for the host series: of all host CPUs)"),
  mem_used_bytes: n("guest side: memory in use (total less available)"),
  mem_total_bytes: n("guest side: memory the guest sees"),
  disk_used_bytes: n("guest side: used bytes of the root filesystem (host series: of the data directory's)"),
  disk_total_bytes: n("guest side: size of the root filesystem"),
  load1: n("load average over one minute"),
  processes: n("guest side: processes"),
  net_rx_bps: n("guest side: bytes per second received (all interfaces but loopback)"),
  net_tx_bps: n("guest side: bytes per second sent"),
};

export const MetricSample = Type.Object(sampleFields, { $id: "MetricSample" });
/** The same, unnamed: a schema with an $id may appear only once in a response. */
const Sample = Type.Object(sampleFields);

export const MetricsQuery = Type.Object({
  since: Type.Optional(Type.String({ description: 'how far back: a duration ("10m", "1h", "24h") or an RFC 3339 time; default 10m', maxLength: 64 })),
  step: Type.Optional(Type.String({ description: 'bucket width: a duration ("5s", "1m"); default: the range in about 300 buckets', maxLength: 32 })),
});

export const MetricHistory = Type.Object(
  {
    sandbox: Type.Optional(Type.String()),
    since: Type.String({ description: "the start of the range (RFC 3339)" }),
    step_ms: Type.Integer(),
    interval_ms: Type.Integer({ description: "how often samples are taken" }),
    samples: Type.Array(MetricSample),
  },
  { $id: "MetricHistory" },
);

export const LiveStats = Type.Object(
  {
    interval_ms: Type.Integer(),
    host: Type.Union([Sample, Type.Null()]),
    sandboxes: Type.Array(Type.Object({ id: Type.String(), name: Type.Union([Type.String(), Type.Null()]), image: Type.String(), sample: Sample })),
  },
  { $id: "LiveStats" },
);
