"""`ggml-viz run --metrics` scraped by a real Prometheus: llama-server serving requests at once on
four slots under the recorder, Debian's `prometheus` scraping our endpoint and the server's own
/metrics every second, and its HTTP API asked what it stored: our token counters against each
response's `timings` and against llama-server's counters, the request histograms against the
recorded run's requests, and every panel of the dashboard (docs/dashboards/ggml-viz.json) with data."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ggml_viz
from ggml_viz.analysis.requests import request_times

from .servers import ask, free_port, running_server, stop_server, wait_for_server

pytestmark = pytest.mark.model

DASHBOARD = Path(__file__).parents[2] / "docs" / "dashboards" / "ggml-viz.json"
SLOTS = 4
CONTEXT = 2048
N_PREDICT = (6, 7, 8)
TOPICS = ["rivers", "mountains", "bread", "clocks", "violins", "glaciers"]
# what is absent without GPU times (the docs say so): its panel has no data on this machine
ABSENT_WITHOUT_GPU = "ggml_viz_gpu_busy_ratio"


@dataclass
class Scraped:
    """What Prometheus stored of the served requests, and what the server and the run say."""

    prometheus_port: int
    timings: list[dict[str, Any]]  # each response's timings
    run: Any = None
    at: float | None = None  # the moment asked about (None: now): the last scrape before the server stopped

    def query(self, expression: str) -> list[dict[str, Any]]:
        """Prometheus's instant query (at `at`: once the server has gone, its series are stale): its result vector."""
        asked = {"query": expression, **({"time": f"{self.at:.3f}"} if self.at is not None else {})}
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?" + urllib.parse.urlencode(asked)
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expression: str) -> float:
        result = self.query(expression)
        assert len(result) == 1, (expression, result)
        return float(result[0]["value"][1])


def start_prometheus(folder: Path, targets: dict[str, int]) -> tuple[subprocess.Popen, int]:
    """Debian's prometheus on loopback, scraping each target's port every second into `folder`."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian's prometheus is not installed (make system-packages installs it)")
    jobs = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        for job, port in targets.items()
    )
    config = folder / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{jobs}")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for_server(port, process, timeout=60, path="/-/ready")
    return process, port


def _complete(port: int, index: int) -> dict[str, Any]:
    body = {
        "prompt": f"Write{' a few' * (index % 3)} words about {TOPICS[index]}.",
        "n_predict": N_PREDICT[index % len(N_PREDICT)],
        "temperature": 0,
        "ignore_eos": True,  # every request generates its n_predict tokens
        "cache_prompt": False,
    }
    return ask(port, "/completion", body)["timings"]


# our counters, once the collector has read the last calls: unchanged over the scrapes of STILL
SETTLED = (
    "changes(ggml_viz_prompt_tokens_total[{still}]) + changes(ggml_viz_generated_tokens_total[{still}])"
    " + changes(ggml_viz_time_per_output_token_seconds_count[{still}])"
)
STILL_S = 4


def _wait_for_settled_scrape(scraped: Scraped, answered: float, timeout: float = 60) -> float:
    """Until both targets were scraped STILL_S seconds after the last answer and our counters, scraped
    each second since, have not changed (the collector reads the spool when the program leaves it a core): the latest
    scrape's time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stamps = [float(r["value"][1]) for r in scraped.query("timestamp(up == 1)")]
        if len(stamps) == 2 and min(stamps) > answered + STILL_S:
            scraped.at = max(stamps) + 0.001
            # (a scrape the busy machine answered late is missed: then fewer samples, wait for more)
            samples = scraped.value(f"count_over_time(ggml_viz_prompt_tokens_total[{STILL_S}s])")
            if samples >= STILL_S - 1 and scraped.value(SETTLED.format(still=f"{STILL_S}s")) == 0:
                return scraped.at
            scraped.at = None
        time.sleep(0.5)
    raise AssertionError("Prometheus did not scrape both targets after the last answer")


@pytest.fixture(scope="module")
def scraped(tmp_path_factory, model_path) -> Any:
    # GIVEN llama-server (its own /metrics on) recorded with our metrics served
    folder = tmp_path_factory.mktemp("metrics")
    metrics_port = free_port()
    with running_server(
        folder / "served.ggmlviz",
        model_path,
        slots=SLOTS,
        context=CONTEXT,
        extra=["--metrics"],
        recording=["--metrics", f"127.0.0.1:{metrics_port}"],
    ) as (server, port):
        # AND a Prometheus scraping both every second
        prometheus, prometheus_port = start_prometheus(folder, {"ggml-viz": metrics_port, "llama-server": port})
        try:
            # WHEN six requests come at once on four slots
            with ThreadPoolExecutor(len(TOPICS)) as pool:
                timings = list(pool.map(lambda i: _complete(port, i), range(len(TOPICS))))
            scraped = Scraped(prometheus_port, timings)
            scraped.at = _wait_for_settled_scrape(scraped, time.time())
            stderr = stop_server(server)
            # (Prometheus keeps what it stored; its queries read it after the server has gone)
            scraped.run = ggml_viz.open(folder / "served.ggmlviz")
            assert scraped.run.status == "complete", stderr[-3000:]
            yield scraped
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=30)


def test_token_counters_are_the_responses_and_the_server_s(scraped):
    # THEN the prompt tokens are the sum of the responses' prompt_n, the generated their predicted_n
    prompt_n = sum(t["prompt_n"] for t in scraped.timings)
    predicted_n = sum(t["predicted_n"] for t in scraped.timings)
    assert predicted_n == sum(N_PREDICT[i % len(N_PREDICT)] for i in range(len(TOPICS)))
    assert scraped.value("ggml_viz_prompt_tokens_total") == prompt_n
    assert scraped.value("ggml_viz_generated_tokens_total") == predicted_n
    # AND llama-server's own counters, scraped beside ours, say the same
    assert scraped.value("llamacpp:prompt_tokens_total") == prompt_n
    assert scraped.value("llamacpp:tokens_predicted_total") == predicted_n


def test_request_histograms_count_each_request_and_token_as_the_run_does(scraped):
    # THEN one time to first token per request, and one time per output token per token after the first
    n = len(TOPICS)
    assert scraped.value("ggml_viz_requests_total") == n
    assert scraped.value("ggml_viz_time_to_first_token_seconds_count") == n
    predicted_n = sum(t["predicted_n"] for t in scraped.timings)
    assert scraped.value("ggml_viz_time_per_output_token_seconds_count") == predicted_n - n
    # AND their sums are the recorded run's request times (the same decode calls, read afterwards)
    times = request_times(scraped.run)
    assert len(times) == n
    assert scraped.value("ggml_viz_time_to_first_token_seconds_sum") == pytest.approx(
        times["ttft_ms"].sum() / 1e3, rel=1e-6
    )
    assert scraped.value("ggml_viz_time_per_output_token_seconds_sum") == pytest.approx(
        times["predicted_ms"].sum() / 1e3, rel=1e-6
    )
    # AND the decode calls by phase: prompt calls and decode steps, every one of them timed
    calls = {r["metric"]["phase"]: float(r["value"][1]) for r in scraped.query("ggml_viz_decode_call_seconds_count")}
    assert calls["prompt"] >= 1 and calls["decode"] >= max(N_PREDICT) - 1


def test_op_time_kv_cells_and_the_program_are_there(scraped):
    ops = {r["metric"]["op"]: float(r["value"][1]) for r in scraped.query("ggml_viz_op_seconds_total")}
    assert ops.get("MUL_MAT", 0) > 0 and all(seconds >= 0 for seconds in ops.values())
    # the KV cells the slots hold: each its last request's cached prefix, prompt and tokens fed back
    assert scraped.value("ggml_viz_kv_cells_capacity") == CONTEXT
    last = request_times(scraped.run).sort_values("arrival_ns").groupby("seq_id").last()
    held = (last["cache_n"] + last["prompt_n"] + last["predicted_n"] - 1).sum()
    assert scraped.value("ggml_viz_kv_cells_used") == held
    info = scraped.query("ggml_viz_program_info")
    assert info[0]["metric"]["program"] == "llama-server" and info[0]["metric"]["model"]
    # nothing dropped, and no GPU here: its share is absent, not zero
    assert scraped.value("ggml_viz_dropped_node_events_total") == 0
    assert scraped.query(ABSENT_WITHOUT_GPU) == []


def test_every_dashboard_panel_has_data(scraped):
    # GIVEN the dashboard users import
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(expressions) >= 8
    # WHEN each panel's query is asked of the Prometheus that scraped the run
    empty = [
        expression for expression in expressions if not scraped.query(expression.replace("$__rate_interval", "1m"))
    ]
    # THEN each has data, but the GPU's share (no GPU times on this machine)
    assert empty == [ABSENT_WITHOUT_GPU], scraped.query("count_over_time(up[1m])")
