// One palette for ops, everywhere (timeline, graph, occupancy, legends): a fixed list of
// distinct hues in the run's op order; and one heat scale for "how much".

export const HUES = [
  "#4e79a7",
  "#f28e2b",
  "#e15759",
  "#76b7b2",
  "#59a14f",
  "#edc948",
  "#b07aa1",
  "#ff9da7",
  "#9c755f",
  "#bab0ac",
  "#6cb6ff",
  "#d37295",
  "#a0cbe8",
  "#ffbe7d",
  "#8cd17d",
  "#b6992d",
  "#499894",
  "#86bcb6",
  "#fabfd2",
  "#d4a6c8",
  "#79706e",
  "#f1ce63",
  "#e8a0a0",
  "#9d7660",
];

// `ops`: the run's ops (OverviewPayload.ops); an op not among them gets a hue from its name.
export function opColor(op, ops = []) {
  const index = ops.indexOf(op);
  if (index >= 0) return HUES[index % HUES.length];
  let hash = 0;
  for (const ch of String(op)) hash = (hash * 31 + ch.charCodeAt(0)) | 0;
  return HUES[Math.abs(hash) % HUES.length];
}

const HEAT_STOPS = [
  [20, 30, 60],
  [40, 90, 160],
  [90, 170, 160],
  [240, 200, 80],
  [255, 240, 180],
];

// 0..1 (clamped) -> dark blue .. yellow, as "rgb(r,g,b)".
export function heat(x) {
  x = Math.max(0, Math.min(1, x));
  const scaled = x * (HEAT_STOPS.length - 1),
    i = Math.min(HEAT_STOPS.length - 2, Math.floor(scaled)),
    f = scaled - i;
  const c = HEAT_STOPS[i].map((v, k) => Math.round(v + (HEAT_STOPS[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

export const PHASE_COLORS = {
  prompt: "#6cb6ff",
  decode: "#f28e2b",
  warmup: "#8a8f9c",
  encode: "#59a14f",
  other: "#b07aa1",
};
// A graph bar on the timeline, by its phase: darker, under the node bars.
export const GRAPH_BAR_COLORS = {
  prompt: "#2f5d8a",
  decode: "#3d4a63",
  warmup: "#34363c",
  encode: "#2f5b3f",
  other: "#4a3d55",
};
export const phaseColor = (phase, colors = PHASE_COLORS) => colors[phase] || colors.other;
// A phase in words: llama.cpp's warm-up decode is not a prompt.
export const phaseName = (phase) => (phase === "warmup" ? "warm-up" : phase);
export const BUFFER_COLORS = { weights: "#4e79a7", kv_cache: "#b07aa1", compute: "#59a14f", output: "#edc948" };

// What a GPU ran that is not a node's kernel, by its op code below zero (KernelBars.op, from
// ui/gpu.py): a kernel the recorder could not map to a node in grey; copies and memsets pale,
// and drawn shorter than kernels in the GPU lane, so they read as another kind of work.
export const GPU_OTHER = {
  "-1": { name: "not attributed", color: "#6b7080" },
  "-2": { name: "memcpy", color: "#f4f4f4" },
  "-3": { name: "memset", color: "#c3b4de" },
};

// A GPU op code's name: the op of the run (`ops`, TimelinePayload.ops) or what GPU_OTHER calls it.
export const gpuOpName = (code, ops) => (code >= 0 ? ops[code] : GPU_OTHER[code].name);

// A GPU op code's color: its op's everywhere (`runOps`: OverviewPayload.ops), or GPU_OTHER's.
export const gpuColor = (code, ops, runOps = ops) => (code >= 0 ? opColor(ops[code], runOps) : GPU_OTHER[code].color);
