// A line chart in SVG of one or more series over time; gaps where a value was not sampled. The
// SVG stretches to its box (preserveAspectRatio none), so its labels are HTML laid over it: text
// inside it would be stretched and squeezed with the box.
import { useState } from "react";

export interface Series {
  label: string;
  color: string;
  values: (number | null | undefined)[];
}

export function Chart(props: { title: string; ts: number[]; series: Series[]; format: (v: number) => string; max?: number; height?: number }) {
  const { ts, series } = props;
  const [hover, setHover] = useState<number | null>(null);
  const W = 600;
  const H = props.height ?? 140;
  const pad = { l: 4, r: 4, t: 8, b: 16 };
  const all = series.flatMap((s) => s.values.filter((v): v is number => typeof v === "number"));
  const max = props.max ?? Math.max(1e-9, ...all) * 1.1;
  const t0 = ts[0] ?? 0;
  const t1 = ts[ts.length - 1] ?? 1;
  const x = (t: number) => pad.l + ((t - t0) / Math.max(1, t1 - t0)) * (W - pad.l - pad.r);
  const y = (v: number) => H - pad.b - (Math.min(v, max) / max) * (H - pad.t - pad.b);
  // A series sampled less often than the chart's buckets (the guest's, every third tick) has
  // empty buckets between its samples: the line goes on across those. It breaks only where the
  // series is missing for longer than its own usual spacing (a stopped sandbox, a gap in history).
  const path = (values: Series["values"]) => {
    const at = values.flatMap((v, i) => (typeof v === "number" ? [i] : []));
    const steps = at
      .slice(1)
      .map((i, k) => ts[i] - ts[at[k]])
      .sort((a, b) => a - b);
    const usual = steps.length ? steps[Math.floor(steps.length / 2)] : 0;
    let d = "";
    at.forEach((i, k) => {
      const joined = k > 0 && ts[i] - ts[at[k - 1]] <= usual * 2.5;
      d += `${joined ? "L" : "M"}${x(ts[i]).toFixed(1)},${y(values[i] as number).toFixed(1)}`;
    });
    return d;
  };
  const latest = (s: Series) => [...s.values].reverse().find((v): v is number => typeof v === "number");
  const at = hover ?? ts.length - 1;
  return (
    <figure className="chart" data-samples={ts.length}>
      <figcaption>
        <strong>{props.title}</strong>
        {series.map((s) => {
          const v = hover !== null ? s.values[at] : latest(s);
          return (
            <span key={s.label} className="legend">
              <i style={{ background: s.color }} /> {s.label} {typeof v === "number" ? props.format(v) : "–"}
            </span>
          );
        })}
        {hover !== null && ts[at] && <span className="muted">{new Date(ts[at]).toLocaleTimeString()}</span>}
      </figcaption>
      {ts.length === 0 ? (
        <div className="empty" style={{ height: H }}>
          no samples yet
        </div>
      ) : (
        <div className="chart-plot">
          <svg
            viewBox={`0 0 ${W} ${H}`}
            preserveAspectRatio="none"
            role="img"
            aria-label={props.title}
            onMouseLeave={() => setHover(null)}
            onMouseMove={(e) => {
              const r = (e.currentTarget as SVGSVGElement).getBoundingClientRect();
              const t = t0 + ((e.clientX - r.left) / r.width) * (t1 - t0);
              let best = 0;
              ts.forEach((v, i) => {
                if (Math.abs(v - t) < Math.abs(ts[best] - t)) best = i;
              });
              setHover(best);
            }}
          >
            <line x1={pad.l} x2={W - pad.r} y1={H - pad.b} y2={H - pad.b} className="axis" />
            <line x1={pad.l} x2={W - pad.r} y1={pad.t} y2={pad.t} className="grid" />
            {series.map((s) => (
              <path key={s.label} d={path(s.values)} fill="none" stroke={s.color} strokeWidth={1.5} vectorEffect="non-scaling-stroke" />
            ))}
            {hover !== null && <line x1={x(ts[at])} x2={x(ts[at])} y1={pad.t} y2={H - pad.b} className="cursor" />}
          </svg>
          <span className="tick tick-max">{props.format(max)}</span>
          <span className="tick tick-start">{new Date(t0).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}</span>
          <span className="tick tick-end">{new Date(t1).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}</span>
        </div>
      )}
    </figure>
  );
}
