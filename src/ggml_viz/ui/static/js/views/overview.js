// Overview: the model, speed, capture settings, prompt and generated text; one bar per graph
// over the run (click: that graph in the graph view); for a run with GPU times, a step's GPU
// busy time against the host's and the top kernels; time by op and by layer, memory by
// buffer kind.

import { opColor, phaseColor, phaseName } from "../colors.js";
import { h, setChildren } from "../dom.js";
import { fmtBytes, fmtInt, fmtNs, fmtPct } from "../format.js";
import { showInGraph, state } from "../store.js";
import { hbar, kv, setupCanvas, sizedCanvas, swatch, tooltip } from "../widgets.js";

export function render(section) {
  const o = state.overview,
    sm = o.summary,
    model = sm.model || {};
  const phases = Object.fromEntries((sm.phases || []).map((p) => [p.phase, p]));
  const capture = o.capture || {};
  const maxOp = Math.max(1, ...sm.time_by_op.map((r) => r.time_ns));
  const maxLayer = Math.max(1, ...sm.top_layers.map((r) => r.time_ns));
  const maxMem = Math.max(1, ...sm.memory_by_buffer.map((r) => r.bytes));
  const barsCanvas = sizedCanvas("graph-bars", "100%", "140px");
  setChildren(
    section,
    h(
      "div",
      { class: "grid" },
      h(
        "div",
        { class: "card", "data-testid": "model-card" },
        h("h3", { text: "model" }),
        h("div", { class: "big", text: model.name || model.description || "?" }),
        h(
          "dl",
          { class: "kv" },
          kv("architecture", model.architecture),
          kv("layers", model.layers),
          kv("parameters", model.parameters ? (model.parameters / 1e6).toFixed(1) + " M" : "?"),
          kv("file", model.path),
          kv("backends", (sm.backends || []).join(", "))
        )
      ),
      h(
        "div",
        { class: "card", "data-testid": "speed-card" },
        h("h3", { text: "speed" }),
        h("div", { class: "big" }, phases.decode ? `${phases.decode.tokens_per_s.toFixed(1)} tok/s decode` : "—"),
        h(
          "dl",
          { class: "kv" },
          kv(
            "prompt",
            phases.prompt
              ? `${phases.prompt.tokens_per_s.toFixed(1)} tok/s, ${phases.prompt.tokens} tokens, ${fmtNs(phases.prompt.time_ns)}`
              : "—"
          ),
          kv("decode", phases.decode ? `${phases.decode.tokens} tokens in ${fmtNs(phases.decode.time_ns)}` : "—"),
          kv("graphs", fmtInt(sm.graphs)),
          kv("node events", `${fmtInt(sm.node_events)} (${fmtInt(sm.timed_node_events)} timed)`),
          kv("status", sm.status + (sm.incomplete_reason ? ": " + sm.incomplete_reason : ""))
        )
      ),
      h(
        "div",
        { class: "card" },
        h("h3", { text: "settings" }),
        h(
          "dl",
          { class: "kv" },
          kv("recorder", capture.recorder),
          kv("detail", capture.detail),
          kv("timing", sm.timing_label || capture.timing),
          kv("sample", capture.sample || "every graph"),
          kv("max events", capture.max_events || "no bound"),
          kv("dropped", `${fmtInt(sm.dropped_graphs)} graphs / ${fmtInt(sm.dropped_events)} events`)
        )
      ),
      sm.n_requests > 1
        ? requestsCard(sm)
        : !sm.prompt && !sm.generated_text && sm.computations.length
          ? computationsCard(sm)
          : h(
              "div",
              { class: "card" },
              h("h3", { text: "prompt" }),
              h("div", { class: "text-block", "data-testid": "prompt", text: sm.prompt || "" }),
              h("h3", { text: "generated" }),
              h("div", { class: "text-block", "data-testid": "generated", text: sm.generated_text || "" })
            )
    ),
    h(
      "div",
      { class: "card" },
      h("h3", { "data-testid": "graph-bars-title", text: barsTitle(o.graph_bars) }),
      barsCanvas,
      h(
        "div",
        { class: "legend", "data-testid": "phase-legend" },
        [...new Set(o.graph_bars.phase)].map((phase) => h("span", {}, swatch(phaseColor(phase)), phaseName(phase)))
      )
    ),
    o.gpu ? gpuCards(o.gpu) : null,
    h(
      "div",
      { class: "grid" },
      h(
        "div",
        { class: "card", "data-testid": "time-by-op" },
        h("h3", { text: "time by op" }),
        o.gpu
          ? h("div", {
              class: "muted",
              "data-testid": "time-by-op-clock",
              text: `where nodes ran on the GPU: ${o.gpu.label}`,
            })
          : null,
        sm.time_by_op.map((r) => hbar(r.op, r.time_ns / maxOp, fmtNs(r.time_ns), opColor(r.op, o.ops)))
      ),
      h(
        "div",
        { class: "card" },
        h("h3", { text: "time by layer (top)" }),
        sm.top_layers.map((r) =>
          hbar(
            r.layer === "none" ? "outside layers" : "layer " + r.layer,
            r.time_ns / maxLayer,
            fmtNs(r.time_ns),
            "#76b7b2"
          )
        )
      ),
      h(
        "div",
        { class: "card", "data-testid": "memory-by-kind" },
        h("h3", { text: "memory by buffer kind" }),
        sm.memory_by_buffer.map((r) => hbar(r.kind, r.bytes / maxMem, fmtBytes(r.bytes), "#b07aa1"))
      )
    )
  );
  drawGraphBars(barsCanvas, o.graph_bars);
}

// A run that served several requests (a server's slots, a benchmark's repetitions): each
// one's prompt and generated text, in the order they began.
function requestsCard(sm) {
  const more = sm.n_requests - sm.requests.length;
  return h(
    "div",
    { class: "card", "data-testid": "requests" },
    h("h3", { text: `requests (${fmtInt(sm.n_requests)})` }),
    h(
      "div",
      { class: "requests" },
      sm.requests.map((r) =>
        h(
          "div",
          { "data-testid": "request" },
          h("div", { class: "muted", text: requestHeading(r) }),
          h("div", { class: "text-block", text: r.prompt }),
          h("div", { class: "text-block generated", text: r.generated })
        )
      )
    ),
    more > 0 ? h("div", { class: "muted", text: `and ${fmtInt(more)} more (ggml-viz query: the tokens table)` }) : null
  );
}

// A run without a prompt (whisper.cpp, anyone's ggml code): its graphs by what they compute.
function computationsCard(sm) {
  const top = Math.max(1, ...sm.computations.map((c) => c.time_ns));
  return h(
    "div",
    { class: "card", "data-testid": "computations" },
    h("h3", { text: "graphs by what they compute" }),
    sm.computations.map((c) =>
      h(
        "div",
        { "data-testid": "computation" },
        h("div", { class: "muted", text: c.label || "(no weights)" }),
        hbar(
          `${phaseName(c.phase)} · ${fmtInt(c.graphs)} graph${c.graphs === 1 ? "" : "s"}`,
          c.time_ns / top,
          fmtNs(c.time_ns),
          phaseColor(c.phase)
        )
      )
    )
  );
}

export const requestHeading = (r) =>
  `sequence ${r.seq_id} at ${fmtNs(r.start_ns)}: ${fmtInt(r.prompt_tokens)} prompt tokens, ${fmtInt(r.generated_tokens)} generated`;

// A step on the GPU (GpuStep) in words: its heading, and the host's time against the GPU's.
export function gpuStepText(step) {
  const name = `${step.phase === "decode" ? "decode step" : step.phase + " graph"} on ${step.device}`;
  return [
    `${name} (median of ${fmtInt(step.graphs)} traced)`,
    `host ${fmtNs(step.host_ns)} · GPU busy ${fmtNs(step.busy_ns)} (${fmtPct(step.busy_share)}) · GPU idle ${fmtNs(Math.max(0, step.host_ns - step.busy_ns))}`,
  ];
}

// What the GPU timer recorded (GpuOverview): per step the GPU's busy time against the host's,
// and the kernel functions taking the most of the GPU's time.
function gpuCards(gpu) {
  const top = Math.max(1, ...gpu.top_kernels.map((k) => k.time_ns));
  return h(
    "div",
    { class: "grid" },
    h(
      "div",
      { class: "card", "data-testid": "gpu-steps" },
      h("h3", { text: "GPU: busy against the host, per step" }),
      h("div", { class: "muted", text: gpu.label }),
      gpu.steps.map((step) => {
        const [heading, times] = gpuStepText(step);
        return h(
          "div",
          { "data-testid": "gpu-step" },
          h("div", { text: heading }),
          hbar("host", 1, fmtNs(step.host_ns), "#3d4a63"),
          hbar("GPU busy", step.host_ns ? step.busy_ns / step.host_ns : 0, fmtNs(step.busy_ns), "#59a14f"),
          h("div", { class: "muted", text: times })
        );
      }),
      h(
        "dl",
        { class: "kv" },
        kv("kernels", fmtInt(gpu.kernels)),
        kv("not attributed to a node", fmtInt(gpu.unattributed)),
        kv("memcpy / memset", fmtInt(gpu.copies))
      )
    ),
    h(
      "div",
      { class: "card", "data-testid": "top-kernels" },
      h("h3", { text: "top kernels (share of the GPU's busy time)" }),
      gpu.top_kernels.map((k) =>
        hbar(k.kernel, k.time_ns / top, fmtPct(k.share), k.kind === "kernel" ? "#edc948" : "#c3b4de")
      )
    )
  );
}

// The bar under x of a canvas `width` wide holding n bars (-1: none).
export const barAt = (x, width, n) => {
  const i = Math.floor((x / width) * n);
  return i >= 0 && i < n ? i : -1;
};

// What the bars are: a bar per graph, or (a long run) per slice of graphs, the slice's longest.
export function barsTitle(bars) {
  const n = bars.graph_id.length,
    total = bars.graphs ?? n;
  if (total <= n) return "one bar per graph (token) over the run";
  return `one bar per ${fmtInt(Math.round(total / n))} graphs over the run (${fmtInt(total)} graphs): the longest of each`;
}

function drawGraphBars(canvas, bars) {
  const { ctx, width, height } = setupCanvas(canvas);
  ctx.clearRect(0, 0, width, height);
  const n = bars.graph_id.length;
  if (n) {
    const max = Math.max(...bars.duration_ns);
    const step = width / n;
    for (let i = 0; i < n; i++) {
      const barHeight = (bars.duration_ns[i] / max) * (height - 4);
      ctx.fillStyle = phaseColor(bars.phase[i]);
      ctx.fillRect(i * step, height - barHeight, Math.max(1, step - (step > 3 ? 1 : 0)), barHeight);
    }
  }
  const hit = (event) => {
    const rect = canvas.getBoundingClientRect();
    return barAt(event.clientX - rect.left, rect.width, n);
  };
  canvas.onmousemove = (event) => {
    const i = hit(event);
    if (i < 0) return tooltip.hide();
    tooltip.show(event.clientX, event.clientY, `graph ${bars.graph_id[i]} · ${bars.phase[i]}`, [
      fmtNs(bars.duration_ns[i]) + `, ${bars.n_tokens[i]} tokens`,
      JSON.stringify(bars.text[i].slice(0, 80)),
    ]);
  };
  canvas.onmouseleave = () => tooltip.hide();
  canvas.onclick = (event) => {
    const i = hit(event);
    if (i >= 0) showInGraph({ graph_id: bars.graph_id[i] });
  };
}
