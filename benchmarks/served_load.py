"""A server held under load, in each way ggml-viz can stay on: llama-server with 4 slots and 16
clients asking without pause, for 10 minutes a mode.

    python benchmarks/served_load.py --server BIN/llama-server --model M.gguf
        [--seconds 600] [--modes untraced,run,dormant,ring,untraced] [--clients 16] [--slots 4]
        [--window-every 60] [--window-seconds 10] [--keep-minutes 2] [--work DIR] [--out table.txt]

Modes: `untraced` (the baseline, run first and last: the traced modes are set against the mean
of the two), `run` (everything recorded), `dormant` (hooks in, nothing recorded, with a window of
--window-seconds opened by `ggml-viz capture` every --window-every seconds) and `ring`
(--keep-minutes). Each mode starts its own server, asks while the clock runs, and stops it with
Ctrl-C, except `run`, whose server is killed with SIGKILL: what was recorded up to the last write
must still be a run.

Prints, per mode: requests answered and generated tokens per second (the server's own
`predicted_n`, summed over answers) and its ratio to untraced; the peak memory of the processes
(the server and ggml-viz's, resident, sampled every 2 s) and at the end; the run's peak and final
size on disk; the first probe's answer against untraced's (a request sent alone, at temperature
0, before the load: under load, batching changes the order of additions, so loaded answers are
not compared); the windows made; and, for `run`, the generated tokens the run holds against
those the answers say were made (the last write's tokens may be missing after SIGKILL).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from served_check import PROMPTS, free_port, wait_ready

PROBE = "Write one sentence about a lighthouse."
N_PREDICT = 32
SAMPLE_EVERY_S = 2.0


def post(port: int, path: str, body: dict[str, Any], timeout: float = 600) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of `root` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def disk_bytes(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def server_process(command: list[str], mode: str, run_dir: Path, args: argparse.Namespace) -> subprocess.Popen:
    if mode == "untraced":
        wrapped = command
    else:
        options = {"run": [], "dormant": ["--dormant"], "ring": ["--keep-minutes", str(args.keep_minutes)]}[mode]
        wrapped = [sys.executable, "-m", "ggml_viz", "run", *options, "-f", "-o", str(run_dir), "--", *command]
    # its log to a file: a pipe read only at the end fills under load, and llama-server stops in its logging
    with open(run_dir.with_name(run_dir.stem + ".log"), "w") as log:
        return subprocess.Popen(wrapped, stdout=subprocess.DEVNULL, stderr=log, text=True)


def load(mode: str, command: list[str], work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One mode: its server under load for args.seconds, measured."""
    port = free_port()
    run_dir = work / f"{mode}.ggmlviz"
    process = server_process([*command, "--host", "127.0.0.1", "--port", str(port)], mode, run_dir, args)
    answers: list[dict[str, Any]] = []
    failures: list[str] = []
    memory: list[int] = []
    disk: list[int] = []
    windows: list[str] = []
    try:
        wait_ready(port, process)
        body = {"n_predict": N_PREDICT, "temperature": 0, "ignore_eos": True}
        probe = post(port, "/completion", {**body, "prompt": PROBE})["content"]
        stop_at = time.monotonic() + args.seconds
        lock = threading.Lock()

        def client(index: int) -> None:
            turn = 0
            while time.monotonic() < stop_at:
                prompt = PROMPTS[(index + turn) % len(PROMPTS)]
                turn += 1
                try:
                    timings = post(port, "/completion", {**body, "prompt": prompt})["timings"]
                except OSError as error:
                    with lock:
                        failures.append(str(error))
                    continue
                with lock:
                    answers.append(timings)

        def open_windows() -> None:
            while time.monotonic() + args.window_every < stop_at:
                time.sleep(args.window_every)
                made = subprocess.run(
                    [sys.executable, "-m", "ggml_viz", "capture", str(run_dir), "--seconds", str(args.window_seconds)],
                    capture_output=True,
                    text=True,
                )
                windows.append(made.stdout.strip() if made.returncode == 0 else f"failed: {made.stderr.strip()}")

        started = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
        if mode == "dormant":
            threads.append(threading.Thread(target=open_windows, daemon=True))
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            memory.append(tree_rss_bytes(process.pid))
            if run_dir.exists():
                disk.append(disk_bytes(run_dir))
            time.sleep(SAMPLE_EVERY_S)
        elapsed = time.monotonic() - started
        if mode == "run":  # killed outright: what was written must still be a run
            for pid in _children(process.pid):  # (the server: the wrapper's child)
                os.kill(pid, signal.SIGKILL)
        else:
            process.send_signal(signal.SIGINT)
        process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    result: dict[str, Any] = {
        "mode": mode,
        "answers": len(answers),
        "failures": len(failures),
        "generated_per_s": sum(a["predicted_n"] for a in answers) / elapsed,
        "predicted": sum(a["predicted_n"] for a in answers),
        "peak_rss": max(memory, default=0),
        "last_rss": memory[-1] if memory else 0,
        "peak_disk": max(disk, default=0),
        "final_disk": disk_bytes(run_dir) if run_dir.exists() else 0,
        "probe": probe,
        "windows": windows,
    }
    if mode == "run":
        result["recorded_generated"] = recorded_generated(run_dir)
    return result


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def recorded_generated(run_dir: Path) -> int | str:
    """The generated tokens the run's requests hold (analysis.requests)."""
    import ggml_viz
    from ggml_viz.analysis.requests import requests_summary

    try:
        return int(requests_summary(ggml_viz.open(run_dir))["predicted_tokens"])
    except Exception as error:  # noqa: BLE001 - reported in the table
        return f"unreadable: {error}"


def table(results: list[dict[str, Any]]) -> list[str]:
    baseline = [r for r in results if r["mode"] == "untraced"]
    base_rate = statistics.mean(r["generated_per_s"] for r in baseline) if baseline else float("nan")
    base_probe = baseline[0]["probe"] if baseline else None
    mib = 1 << 20
    lines = [
        f"{'mode':<9} {'answers':>7} {'fail':>4} {'gen t/s':>8} {'ratio':>6} {'peak RSS':>9} {'end RSS':>8} "
        f"{'peak disk':>10} {'end disk':>9} {'probe':>6}  notes"
    ]
    for r in results:
        notes = []
        if r["windows"]:
            made = [w for w in r["windows"] if not w.startswith("failed")]
            notes.append(f"windows {len(made)} of {len(r['windows'])}")
        if "recorded_generated" in r:
            notes.append(f"after SIGKILL the run holds {r['recorded_generated']} of {r['predicted']} generated tokens")
        lines.append(
            f"{r['mode']:<9} {r['answers']:>7} {r['failures']:>4} {r['generated_per_s']:>8.1f} "
            f"{r['generated_per_s'] / base_rate:>6.3f} {r['peak_rss'] / mib:>7.0f}Mi {r['last_rss'] / mib:>6.0f}Mi "
            f"{r['peak_disk'] / mib:>8.1f}Mi {r['final_disk'] / mib:>7.1f}Mi "
            f"{'same' if r['probe'] == base_probe else 'DIFF':>6}  {'; '.join(notes)}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--modes", default="untraced,run,dormant,ring,untraced")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--window-every", type=float, default=60)
    parser.add_argument("--window-seconds", type=float, default=10)
    parser.add_argument("--keep-minutes", type=float, default=2)
    parser.add_argument("--work", default=None)
    parser.add_argument("--out", default=None, help="also write the table here")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    command = [args.server, "-m", args.model, "-np", str(args.slots), "-c", str(512 * args.slots)]
    command += ["-t", str(args.threads), "--seed", "1"]
    results = []
    for mode in args.modes.split(","):
        print(f"== {mode}: {args.seconds:.0f} s", file=sys.stderr, flush=True)
        results.append(load(mode, command, work, args))
    lines = table(results)
    lines.append(f"({args.clients} clients, {args.slots} slots, {args.seconds:.0f} s a mode, n_predict {N_PREDICT})")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
