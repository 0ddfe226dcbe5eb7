"""A served model, checked against the server's own figures: llama-server with several slots,
requests arriving together, once untraced and once under `ggml-viz run`.

    python benchmarks/served_check.py --server BIN/llama-server --model M.gguf [--slots 4]
        [--requests 8] [--server-args "-ngl 99"] [--work DIR] [--out table.txt]

Prints one table, claim by claim, with the figure and pass or fail:
- the answers (temperature 0) are the same traced and untraced;
- llama.cpp split calls of several sequences into several graphs, and every graph holds as many
  tokens as its own token lookup read (graphs.n_tokens against the lookup's rows);
- the tokens of the requests are those the server says it fed (each response's prompt_n, and
  predicted_n - 1: the last generated token is never fed back);
- per request, where ggml-viz gives request times (analysis.requests), its token counts equal the
  response's `timings` and its prompt and decode times are within 5 % of them.
A first wave of requests, then a second whose prompts extend the first's (the prompt cache on).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog, and then",
    "List three colors:",
    "In the beginning of the twentieth century, the city of Paris was home to many painters who",
    "Water boils at",
    "A haiku about the sea:",
    "The three laws of motion, as Newton stated them in his Principia, say that",
    "Hello",
    "Seven plus five is",
    "The recipe begins with flour, sugar and",
    "My favourite book",
    "Rain falls on the hills while the shepherds",
]
N_PREDICT = 24


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(port: int, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = process.stderr.read()[-2000:] if process.stderr else ""
            raise SystemExit(f"the server ended early ({process.returncode}): {said}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise SystemExit("the server did not become ready")


def complete(port: int, prompt: str, cache: bool) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": N_PREDICT, "temperature": 0, "cache_prompt": cache, "ignore_eos": True}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as answer:
        return {"prompt": prompt, **json.loads(answer.read())}


def serve(command: list[str], prompts: list[str], traced: Path | None) -> list[dict[str, Any]]:
    """Start the server (under ggml-viz run when `traced`), send the two waves, stop it."""
    port = free_port()
    server_command = [*command, "--host", "127.0.0.1", "--port", str(port)]
    if traced is not None:
        server_command = [sys.executable, "-m", "ggml_viz", "run", "-f", "-o", str(traced), "--", *server_command]
    process = subprocess.Popen(server_command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(port, process)
        answers = []
        with ThreadPoolExecutor(len(prompts)) as pool:
            answers += list(pool.map(lambda prompt: complete(port, prompt, False), prompts))
            # the second wave extends the first's prompts: the slots' caches hold their prefixes
            longer = [f"{prompt} (part {index + 2})" for index, prompt in enumerate(prompts)]
            answers += list(pool.map(lambda prompt: complete(port, prompt, True), longer))
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    return answers


def lookup_rows(run: Any) -> Any:
    """Per graph, the rows its token lookup read: the GET_ROWS of a weight (its first source)."""
    edges = run.edges[(run.edges.src_usage == "weights") & (run.edges.src_slot == 0)]
    lookups = edges.merge(run.nodes[["graph_id", "node_index", "op", "ne1"]], on=["graph_id", "node_index"])
    return lookups[lookups.op == "GET_ROWS"].drop_duplicates("graph_id").set_index("graph_id")["ne1"]


def check(untraced: list[dict[str, Any]], traced: list[dict[str, Any]], run_path: Path) -> list[tuple[str, str, bool]]:
    import ggml_viz

    rows: list[tuple[str, str, bool]] = []
    same = [a["content"] == b["content"] for a, b in zip(untraced, traced, strict=True)]
    rows.append(("answers traced = untraced", f"{sum(same)} of {len(same)}", all(same)))
    run = ggml_viz.open(run_path)
    rows.append(("run complete", run.status, run.status == "complete"))
    graphs = run.graphs.set_index("graph_id")
    served = graphs[graphs.phase.isin(["prompt", "decode"])]
    per_call = served.groupby(["context_id", "decode_index"]).size()
    rows.append(
        (
            "calls split into several graphs",
            f"{int((per_call > 1).sum())} of {len(per_call)}",
            bool((per_call > 1).any()),
        )
    )
    looked_up = lookup_rows(run).reindex(served.index)
    wrong = int((served.n_tokens != looked_up).sum())
    rows.append(("graphs whose tokens differ from their lookup's rows", f"{wrong} of {len(served)}", wrong == 0))
    fed = sum(a["timings"]["prompt_n"] + a["timings"]["predicted_n"] - 1 for a in traced)
    tokens = run.tokens[run.tokens.graph_id.isin(served.index)]
    rows.append(("request tokens recorded / fed by the server", f"{len(tokens)} / {fed}", len(tokens) == fed))
    rows += request_rows(run, traced)
    return rows


def request_rows(run: Any, answers: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """Per request, ggml-viz's figures (analysis.requests) against the response's timings: the
    token counts equal; the times within 5 % (the server's clock also runs over its own batching
    and sampling between the calls, which no graph shows)."""
    from ggml_viz.analysis.requests import request_times, requests

    times, texts = request_times(run).to_dict(orient="records"), requests(run)
    counts_equal, within, compared, worst = 0, 0, 0, 0.0
    for answer in answers:
        # the request whose computed prompt (past its cached prefix) ends the answer's, ending as it does
        mine = [
            row
            for row, text in zip(times, texts, strict=True)
            if text["prompt"].strip()
            and answer["prompt"].endswith(text["prompt"].strip())
            and text["prompt"].strip().endswith(answer["prompt"].split()[-1])
        ]
        if len(mine) != 1:
            continue
        ours, timings = mine[0], answer["timings"]
        counts_equal += all(int(ours[key]) == int(timings[key]) for key in ("prompt_n", "cache_n", "predicted_n"))
        for key in ("prompt_ms", "predicted_ms"):
            difference = abs(float(ours[key]) - timings[key]) / timings[key]
            compared, within, worst = compared + 1, within + (difference <= 0.05), max(worst, difference)
    n = len(answers)
    return [
        ("requests found", f"{len(times)} / {n}", len(times) == n),
        ("requests whose token counts equal the server's", f"{counts_equal} of {n}", counts_equal == n),
        ("request times within 5 % of the server's", f"{within} of {compared}", within == compared),
        ("worst request time against the server's", f"{100 * worst:.1f} %", worst <= 0.05),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--server-args", default="", help="more llama-server arguments (-ngl 99)")
    parser.add_argument("--work", default=None)
    parser.add_argument("--out", default=None, help="also write the table here")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp())
    command = [args.server, "-m", args.model, "-np", str(args.slots), "-c", str(1024 * args.slots), "--seed", "1"]
    command += args.server_args.split()
    prompts = PROMPTS[: args.requests]
    started = time.monotonic()
    untraced = serve(command, prompts, None)
    traced = serve(command, prompts, work / "served.ggmlviz")
    rows = check(untraced, traced, work / "served.ggmlviz")
    width = max(len(claim) for claim, _, _ in rows)
    lines = [f"{claim:<{width}}  {figure:>14}  {'pass' if ok else 'FAIL'}" for claim, figure, ok in rows]
    lines.append(f"({len(prompts)} requests a wave, two waves, {args.slots} slots, {time.monotonic() - started:.0f} s)")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
