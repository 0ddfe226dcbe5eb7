"""How the web viewer copes with a big run: a synthetic run of about 1,000,000 node events.

Prints:
- server: time to read the run and prepare its views (once, before the URL is printed);
  median and 95th percentile of a full-window timeline request (all events in view,
  summed per pixel column) and of a zoomed one, over repeated requests;
- browser (Debian's Chromium, headless, driven by Playwright): time from navigation to the
  browser's first contentful paint and to the first timeline drawn with data;
- pan and zoom: a scripted sequence of wheel zooms and drag pans over the timeline,
  with the frame intervals that requestAnimationFrame sees meanwhile (Chromium's
  Performance API), median and 95th percentile, and the time of each of our redraws.

Targets: first paint <= 2 s, pan/zoom frame median <= 50 ms, server window request <= 200 ms.

    python benchmarks/ui.py                 # 1,001,000 events (1750 graphs of a 30-layer model)
    python benchmarks/ui.py --graphs 200    # smaller
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui.server import make_viewer

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip

FRAME_RECORDER = """() => { window.__frames = []; let last = performance.now();
  const tick = (now) => { window.__frames.push(now - last); last = now;
    if (window.__recording) requestAnimationFrame(tick); };
  window.__recording = true; requestAnimationFrame(tick); }"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed_get(url: str, token: str, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        request = urllib.request.Request(url, headers={"X-GGML-Viz-Token": token})
        start = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            response.read()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=1750, help="graphs of 572 nodes each (default 1750: 1,001,000)")
    parser.add_argument("--repeats", type=int, default=15, help="server requests per measurement")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        path = write_synthetic_run(Path(folder) / "big.ggmlviz", graphs=args.graphs, layers=30)
        print(f"synthetic run written in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        viewer = make_viewer(path, port=0)
        load_s = time.perf_counter() - start
        view = viewer.registry.view("r0")
        events, duration = view.n_events, view.duration_ns
        print(f"{events:,} node events in {args.graphs:,} graphs; server ready in {load_s:.2f} s (read and prepared)")
        viewer.serve_in_background()
        base = viewer.url.split("/?")[0]
        token = viewer.url.split("token=")[1]
        full = timed_get(f"{base}/api/runs/r0/timeline?t0=0&t1={duration}&width=1600", token, args.repeats)
        zoomed = timed_get(
            f"{base}/api/runs/r0/timeline?t0={duration // 2}&t1={duration // 2 + duration // 200}&width=1600",
            token,
            args.repeats,
        )
        print(
            f"server, full-window timeline request: median {statistics.median(full):.1f} ms, "
            f"p95 {percentile(full, 0.95):.1f} ms (target <= 200 ms)"
        )
        print(
            f"server, zoomed (0.5 %) timeline request: median {statistics.median(zoomed):.1f} ms, "
            f"p95 {percentile(zoomed, 0.95):.1f} ms"
        )
        browser_figures(viewer.url, args.chromium)
        viewer.stop()


def browser_figures(url: str, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.goto(url + "#timeline")
        page.wait_for_function(
            "() => window.ggmlViz.timeline && window.ggmlViz.timeline.firstDataPaint", timeout=60_000
        )
        fcp = page.evaluate(
            "() => (performance.getEntriesByName('first-contentful-paint')[0] || {startTime: NaN}).startTime"
        )
        first_timeline = page.evaluate("() => window.ggmlViz.timeline.firstDataPaint")
        print(
            f"browser, first contentful paint: {fcp / 1000:.2f} s; first timeline drawn with data: "
            f"{first_timeline / 1000:.2f} s (target <= 2 s)"
        )
        box = page.locator("[data-testid=timeline-canvas]").bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + 80
        page.evaluate("() => { window.ggmlViz.timeline.frameTimes = []; }")
        page.evaluate(FRAME_RECORDER)
        page.mouse.move(x, y)
        for _ in range(40):  # zoom in, in steps
            page.mouse.wheel(0, -120)
            page.wait_for_timeout(16)
        for step in range(40):  # pan back and forth by dragging
            page.mouse.down()
            page.mouse.move(x + (60 if step % 2 == 0 else -60), y, steps=4)
            page.mouse.up()
            page.mouse.move(x, y)
        for _ in range(40):  # zoom out again
            page.mouse.wheel(0, 160)
            page.wait_for_timeout(16)
        page.wait_for_timeout(300)
        frames = page.evaluate("() => { window.__recording = false; return window.__frames.slice(1); }")
        draws = page.evaluate("() => window.ggmlViz.timeline.frameTimes")
        print(
            f"pan/zoom: {len(frames)} frames, frame interval median {statistics.median(frames):.1f} ms, "
            f"p95 {percentile(frames, 0.95):.1f} ms (target median <= 50 ms); "
            f"{len(draws)} redraws, median {statistics.median(draws):.1f} ms, p95 {percentile(draws, 0.95):.1f} ms"
        )
        browser.close()


if __name__ == "__main__":
    main()
