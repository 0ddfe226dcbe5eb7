"""The terminal renderers: a run's summary and a joined run's, as rich tables and lines.

Commands import this module when the parser is built, so rich comes in inside each function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ..analysis.devices import DeviceSummary
    from ..analysis.kv import KvUse
    from ..analysis.moe import MoeSummary
    from ..analysis.requests import Percentiles, RequestsSummary
    from ..analysis.roofline import RooflineSummary
    from ..analysis.speculative import SpeculativeSummary
    from ..analysis.summary import OpThroughput, RunSummary
    from ..runformat.reader import Run


def format_ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def format_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


# What of a text the terminal summary shows: its start and its end, the rest counted (the whole
# text stays in the run and in `summary --json`). A day of a server generates megabytes of it.
TEXT_SHOWN = 300


def readable(text: str, limit: int = TEXT_SHOWN) -> str:
    """`text` quoted as repr does, cut to its first and last limit/2 characters where longer, with
    how many characters were left out between them."""
    if len(text) <= limit:
        return repr(text)
    half = limit // 2
    return f"{text[:half]!r} … [{len(text) - 2 * half:,} characters left out] … {text[-half:]!r}"


def print_short_summary(run: Run, console: Console | None = None) -> None:
    from ..analysis.summary import summarize

    render_summary(summarize(run, top=5), console, short=True)


def _render_requests(console: Console, summary: RunSummary, width: int = 60) -> None:
    """A server's (or a benchmark's) requests: per sequence, its prompt and generated text."""

    console.print(f"requests: {summary['n_requests']:,}")
    for request in summary["requests"]:
        prompt, generated = readable(request["prompt"], width), readable(request["generated"], width)
        console.print(
            f"  seq {request['seq_id']} at {format_ms(request['start_ns'])}: {prompt} → {generated}",
            markup=False,
            highlight=False,
        )
    if summary["n_requests"] > len(summary["requests"]):
        console.print(f"  and {summary['n_requests'] - len(summary['requests']):,} more")
    _render_request_times(console, summary.get("request_times"))


def _render_request_times(console: Console, times: RequestsSummary | None) -> None:
    """The requests' counts and time percentiles, in words (as llama-server's timings count them)."""
    if not times:
        return

    def spread(figures: Percentiles) -> str:
        if figures["p50"] is None:
            return "none"
        return ", ".join(f"{name} {figures[name]:,.1f}" for name in ("p50", "p90", "p99", "max")) + " ms"

    console.print("[bold]Requests[/]")
    lines = [
        f"{times['n_requests']:,} requests: {times['prompt_tokens']:,} prompt tokens computed, "
        f"{times['cached_tokens']:,} found cached, {times['predicted_tokens']:,} generated",
        f"time to first token: {spread(times['ttft_ms'])}",
        f"time per output token: {spread(times['tpot_ms'])}",
        f"prompt: {spread(times['prompt_ms'])}",
        f"generation: {spread(times['predicted_ms'])}",
    ]
    if times["shared_batches"] is not None:
        lines.append(f"{times['shared_batches']:.0%} of their decode calls held other requests' tokens too")
    lines.append(f"queue wait: {times['queue_wait']}")
    for line in lines:
        console.print(f"  {line}", markup=False, highlight=False)


def render_summary(summary: RunSummary, console: Console | None = None, short: bool = False) -> None:
    """The summary's tables and lines on `console` (default: a Console on standard output)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    _render_head(console, summary, short)
    waits = summary.get("node_waits") or {}
    _render_waits(console, summary)
    _render_gpu(console, summary, short)
    render_devices(summary.get("devices"), console)
    if summary["untimed_graphs"]:
        console.print(
            f"[yellow]{summary['untimed_graphs']:,} graphs to be timed inline kept graph times only "
            "(their nodes did not report as ggml's CPU backend does; try --timing sync)[/]"
        )
    phases = Table("phase", "graphs", "tokens", "time", "tokens/s", title="phases", title_justify="left")
    for row in summary["phases"]:
        rate = "—" if row["tokens_per_s"] is None else f"{row['tokens_per_s']:,.1f}"
        phases.add_row(row["phase"], f"{row['graphs']:,}", f"{row['tokens']:,}", format_ms(row["time_ns"]), rate)
    console.print(phases)
    computations = summary.get("computations") or []
    if (
        len({computation["label"] for computation in computations}) > 1
    ):  # graphs that compute different parts of a model
        table = Table("computes", "phase", "graphs", "time", title="graphs by what they compute", title_justify="left")
        for computation in computations:
            table.add_row(
                computation["label"] or "(no weights)",
                computation["phase"],
                f"{computation['graphs']:,}",
                format_ms(computation["time_ns"]),
            )
        console.print(table)
    if summary["timed_node_events"]:
        console.print(_time_table("time by op", "op", summary["time_by_op"], bool(waits.get("seen"))))
        if not short:
            console.print(_time_table("top layers", "layer", summary["top_layers"]))
            console.print(_time_table("top tensors", "name", summary["top_tensors"]))
            console.print(_time_table("time by component", "component", summary["time_by_component"]))
            console.print(_throughput_table(summary["throughput_by_op"]))
            _print_limits(console, summary.get("roofline") or {}, summary["run"])
    elif not summary.get("gpu"):
        console.print(f"no node was timed on its own ({summary['untimed_reason']}): graph times only")
    _render_memory(console, summary)
    _render_moe(console, summary.get("moe") or {}, short)
    _render_speculative(console, summary.get("speculative"), short)
    if summary.get("findings"):
        console.print("[bold]findings[/]")
        for finding in summary["findings"]:
            console.print(f"  • {finding}", markup=False, highlight=False)
    for section in summary.get("sections") or []:  # a titled finding's (a plugin's) sentences, apart
        console.print(f"[bold]{escape(section['title'])}[/]")
        for line in section["lines"]:
            console.print(f"  {line}", markup=False, highlight=False)


def _render_head(console: Console, summary: RunSummary, short: bool) -> None:
    """The run, its model, its texts or requests, its backends and node events."""
    model = summary.get("model") or {}
    status = summary["status"]
    console.print(f"[bold]{summary['run']}[/]  experiment {summary['experiment_id'][:12]}  status [bold]{status}[/]")
    if summary.get("incomplete_reason"):
        console.print(f"[yellow]incomplete: {summary['incomplete_reason']}[/]")
    if model:
        console.print(
            f"model: {model.get('name') or '?'} ({model.get('description')}, {model.get('architecture')}, "
            f"{model.get('layers')} layers, {model.get('parameters', 0) / 1e6:,.1f} M parameters)"
        )
        console.print(f"file:  {model.get('path')}", markup=False, highlight=False)
    prompt, generated = summary.get("prompt"), summary.get("generated_text")
    if prompt and not short:
        console.print(f"prompt: {readable(prompt)}", markup=False, highlight=False)
        if generated:
            console.print(f"generated: {readable(generated)}", markup=False, highlight=False)
    if summary.get("n_requests", 0) > 1 and not short:
        _render_requests(console, summary)
    console.print(
        f"backends: {', '.join(summary['backends']) or '?'}   graphs: {summary['graphs']:,}   "
        f"node events: {summary['node_events']:,} ({summary['timed_node_events']:,} timed)"
        + (
            f"   dropped: {summary['dropped_graphs']:,} graphs / {summary['dropped_events']:,} events"
            if summary["dropped_graphs"]
            else ""
        )
        + (f"\ntiming: {summary['timing_label']}" if (summary.get("clocks") or {}).get("host") else "")
    )


def _render_waits(console: Console, summary: RunSummary) -> None:
    """Inline timing: how much of node time was waiting at the barriers, and where ends were not seen."""
    waits = summary.get("node_waits") or {}
    if (summary.get("clocks") or {}).get("host") and summary["timing"] == "inline":
        if waits.get("seen"):
            share = waits["wait_ns"] / waits["time_ns"] if waits["time_ns"] else 0.0
            console.print(
                f"node time: each node's work and its wait for the other threads at the barrier after it "
                f"({share:.1%} of node time waiting)"
            )
        if waits.get("not_seen"):
            console.print(
                f"[yellow]{waits['not_seen']:,} nodes' ends were not seen (ggml's barrier could not be reached): "
                "each of their times holds the wait for the stragglers of the node before it[/]"
            )


def _render_memory(console: Console, summary: RunSummary) -> None:
    """The buffers by kind, the KV cache's fill and the weight bytes a graph reads."""
    from rich.table import Table

    memory = Table(
        "kind", "buffers", "bytes", "peak in use", "names", title="memory by buffer kind", title_justify="left"
    )
    for kind in summary["memory_by_buffer"]:
        memory.add_row(
            kind["kind"],
            str(kind["buffers"]),
            format_bytes(kind["bytes"]),
            format_bytes(kind["peak_bytes"]),
            kind["names"],
        )
    console.print(memory)
    kv, reads = summary.get("kv_cache") or {}, summary.get("weight_reads") or {}
    if kv.get("layers"):
        console.print(
            f"KV cache: {kv['layers']} layers, {kv['used']:,} of {kv['capacity']:,} cells used ({kv['fill']:.1%})"
        )
    if (use := summary.get("kv")) is not None:
        console.print(kv_use_line(use))
    if reads.get("weights_read"):
        source = "the file mapping" if reads["weights_from_mmap"] else "loaded copies"
        per_graph = format_bytes(reads["weight_bytes_per_graph"])
        console.print(f"weight bytes the ops of a graph take as sources: {per_graph}, from {source}")


def kv_use_line(kv: KvUse) -> str:
    """The slots' KV cells in one line: the peak of all and of each sequence, shifts and reuses, and
    the KV bytes a decode step read per token at its largest context."""
    of = f" of {kv['capacity']:,}" if kv["capacity"] else ""
    each = f" of {kv['per_sequence_capacity']:,}" if kv["per_sequence_capacity"] else ""
    slots = ", ".join(f"{seq}: {cells:,}" for seq, cells in kv["peak_cells_by_sequence"].items())
    line = (
        f"slots: at most {kv['peak_cells']:,}{of} KV cells at once (per sequence{each}: {slots}); "
        f"{kv['context_shifts']} context shifts, {kv['cache_reuses']} prompt-cache reuses"
    )
    if kv["decode_kv_bytes_per_token"] is not None:
        line += (
            f"; a decode step read {format_bytes(kv['decode_kv_bytes_per_token'])} of KV cache per token "
            f"at {kv['decode_context_cells']:,} cells"
        )
    return line


def _render_speculative(console: Console, speculative: SpeculativeSummary | None, short: bool) -> None:
    """Speculative decoding: drafts verified and accepted, where their time went, and what plain
    single-token steps would have cost for the same tokens; per request unless short."""
    from rich.table import Table

    if not speculative:
        return
    spec = speculative
    drafts = (
        f"draft model (context {', '.join(map(str, spec['draft_contexts']))}, {spec['draft_graphs']:,} graphs)"
        if spec["draft_contexts"]
        else "draftless (drafts from the text itself)"
    )
    assumed = (
        f", {spec['accepted_assumed']:,} of them at requests' ends, counted accepted"
        if spec["accepted_assumed"]
        else ""
    )
    acceptance = f" ({spec['acceptance']:.0%})" if spec["acceptance"] is not None else ""
    console.print(f"[bold]speculative decoding[/]: {drafts}")
    console.print(
        f"  {spec['verifications']:,} verifications: {spec['drafted']:,} tokens drafted, "
        f"{spec['accepted']:,} accepted{acceptance}{assumed}"
    )
    console.print(
        f"  drafting {format_ms(spec['draft_ns'])} (of it {format_ms(spec['draft_reread_ns'])} re-reading the "
        f"target's batches), verifying {format_ms(spec['verify_ns'])} (of it {format_ms(spec['rejected_ns'])} "
        "on rejected drafts)"
    )
    if spec["plain_estimate_ns"] is None:
        console.print(
            "  no single-token decode step of the target to compare with: whether it saves time cannot be told"
        )
    else:
        console.print(
            f"  the {spec['tokens_fed']:,} tokens the verifications fed, at this run's single-token decode step "
            f"({format_ms(spec['plain_step_ns'] or 0)}, median of {spec['plain_steps']:,}): "
            f"{format_ms(spec['plain_estimate_ns'])}, against {format_ms(spec['draft_ns'] + spec['verify_ns'])} "
            "drafting and verifying"
        )
    if short or len(spec["requests"]) < 2:
        return
    table = Table(
        "seq",
        "start",
        "drafted",
        "accepted",
        "drafting",
        "verifying",
        "rejected",
        title="speculation per request",
        title_justify="left",
    )
    for request in spec["requests"]:
        table.add_row(
            str(request["seq_id"]),
            format_ms(request["start_ns"]),
            f"{request['drafted']:,}",
            f"{request['accepted']:,}",
            format_ms(request["draft_ns"]),
            format_ms(request["verify_ns"]),
            format_ms(request["rejected_ns"]),
        )
    console.print(table)


def _render_moe(console: Console, moe: MoeSummary, short: bool) -> None:
    """A mixture of experts' routing: per layer, how evenly its tokens spread over its experts."""
    if not moe.get("layers"):
        return
    console.print(
        f"[bold]mixture of experts[/]: {moe['layers']} MoE layers, {moe['n_expert']} experts, "
        f"{moe['experts_per_token']} per token; load imbalance (busiest / mean) median "
        f"{moe['median_max_over_mean']:.2f}, worst {moe['worst_max_over_mean']:.2f} (layer {moe['worst_layer']}); "
        f"{moe['never_used']} expert-layer pairs never chosen"
        + (
            f"; the routing of {moe['graphs_routed']} of its {moe['graphs_with_experts']} graphs with experts "
            "(read in the GPU timer's windows)"
            if moe["graphs_routed"] < moe["graphs_with_experts"]
            else ""
        )
    )
    if short:
        return
    from rich.table import Table

    table = Table(
        "layer",
        "tokens",
        "busiest/mean",
        "never used",
        "entropy",
        "hottest experts (share of load)",
        title="expert load per MoE layer",
        title_justify="left",
    )
    for row in moe["balance"]:
        hottest = ", ".join(f"{expert} ({share:.0%})" for expert, share in row["hottest"])
        table.add_row(
            str(row["layer"]),
            f"{row['tokens']:,}",
            f"{row['max_over_mean']:.2f}",
            f"{row['never_used']}/{row['n_expert']}",
            f"{row['entropy_share']:.0%}",
            hottest,
        )
    console.print(table)
    for device, size in moe["decode_expert_bytes_by_device"].items():
        share = moe["token_share_by_device"].get(device)
        console.print(
            f"  experts on {device}: a decode step reads {format_bytes(size)} of them"
            + (f"; they computed {share:.0%} of the routed tokens" if share is not None else "")
        )


def _render_gpu(console: Console, summary: RunSummary, short: bool) -> None:
    """Where node times come from on a GPU, what the GPU timer cost, the GPU's decode step."""
    from rich.table import Table

    gpu = summary.get("gpu")
    if not gpu:
        return
    clocks = summary.get("clocks") or {}
    if gpu["graphs_traced"]:
        console.print(
            f"node time on the GPU: its own clock ({gpu['source']}): "
            f"{gpu['graphs_traced']:,} of "
            f"{gpu['graphs']:,} graphs traced ({gpu['mode']}), {gpu['attributed_kernels']:,} of {gpu['kernels']:,} "
            "kernels attributed to their nodes"
            + (f"; {clocks['host']:,} node events on the host's clock" if clocks.get("host") else "")
        )
    else:
        reason = gpu.get("problem") or ("--gpu off" if gpu.get("mode") == "off" else "no graph traced")
        console.print(f"[yellow]GPU nodes: graph times only ({reason})[/]", highlight=False)
    if gpu.get("estimate"):
        console.print(f"GPU time over the run, by op, layer, tensor, component and kernel: {gpu['estimate']}")
    for warning in gpu.get("warnings") or []:
        console.print(f"[yellow]{warning}[/]", highlight=False)
    if gpu["unattributed_graphs"]:
        console.print(
            f"[yellow]{gpu['unattributed_graphs']:,} traced graphs kept their graph time: their kernels did not "
            "match a known pass of their graph's structure[/]"
        )
    cost = gpu.get("cost")
    if cost:
        traced = (
            f"traced graphs {cost['traced_extra_ns'] / 1e6:,.1f} ms longer than untraced ones of their structure"
            if cost["compared"]
            else "no untraced graph to set the traced ones against"
        )
        vulkan = gpu.get("timer") == "vulkan"
        switching = "the Vulkan layer switched on and off" if vulkan else "CUPTI attached and detached"
        console.print(
            f"GPU timer cost: {'about' if cost['compared'] else 'at least'} {cost['share']:.1%} of this run's graph "
            f"time ({switching}: {cost['attach_ns'] / 1e6:,.1f} ms; {traced})"
        )
    step = gpu.get("decode_step")
    if step:
        console.print(
            f"decode step (median of {step['steps']:,} traced): the GPU busy {step['busy_ns'] / 1e6:,.3f} ms, first "
            f"to last kernel {step['span_ns'] / 1e6:,.3f} ms, of {step['host_ns'] / 1e6:,.3f} ms per step on the "
            f"host ({step['host_of']}): busy {step['busy_share']:.0%}"
        )
    if gpu["top_kernels"] and not short:
        title = "GPU time by kernel (busy, share: the run's, estimated; count, mean: the traced graphs')"
        table = Table("kernel", "count", "busy", "share", "mean", title=title, title_justify="left")
        for row in gpu["top_kernels"]:
            table.add_row(
                row["function"],
                f"{row['count']:,}",
                format_ms(row["busy_ns"]),
                f"{row['share']:.1%}",
                f"{row['mean_ns'] / 1e3:,.1f} µs",
            )
        console.print(table)


def _throughput_table(rows: Sequence[OpThroughput]) -> Table:
    """Work and throughput per op; against this machine's limits where the run holds them."""
    from rich.table import Table

    judged = any(row.get("of_limit") is not None for row in rows)
    title = "work and throughput by op (estimates, see ggml_viz.analysis.flops)"
    if judged:
        title = "work, throughput and distance to this machine's limits by op (see ggml_viz.analysis.roofline)"
    table = Table(
        "op",
        "time",
        "GFLOP",
        "GB moved",
        "GFLOP/s",
        "GB/s",
        "FLOP/byte",
        *(["bound", "of limit"] if judged else []),
        title=title,
        title_justify="left",
    )

    def number(value: Any, digits: int = 2) -> str:
        return "—" if value is None or value != value else f"{value:,.{digits}f}"

    for row in rows:
        bound = "*" if row.get("upper_bound") else ""  # (on the figures its FLOPs make)
        limit = [row.get("bound") or "—", "—" if row.get("of_limit") is None else f"{row['of_limit']:.0%}"]
        table.add_row(
            row["op"],
            format_ms(row["time_ns"]),
            number(row["flops"] / 1e9, 3) + bound,
            number(row["bytes"] / 1e9, 3),
            number(row["gflop_per_s"]) + bound,
            number(row["gb_per_s"]),
            number(row["flops_per_byte"]) + bound,
            *(limit if judged else []),
        )
    if any(row.get("upper_bound") for row in rows):
        table.caption = (
            "* over every KV cell of its graph's window (its tokens' positions are not known): an "
            "upper bound where its mask hides cells, which ggml's kernels skip"
        )
        table.caption_justify = "left"
    return table


def _print_limits(console: Console, roofline: RooflineSummary, run: str) -> None:
    """Which limits the run was judged against, or how to measure them."""
    limits = roofline.get("limits")
    if not limits:
        console.print(
            f"this machine's limits are not in the run: `ggml-viz limits --for {run}` measures them "
            "(about 20 s) and the summary then says how far each op is from them",
            markup=False,
        )
        return
    where = "" if limits.get("same_machine") else " (not the machine the run was recorded on)"
    rows = [row for row in limits["measurements"] if row["device"] == "CPU" and row["threads"] in limits["judged_at"]]
    reads = ", ".join(
        f"{row['gb_per_s']:,.1f} GB/s at {row['threads']} threads" for row in rows if row["what"] == "memory_read"
    )
    console.print(
        f"judged against the limits measured on {(limits.get('machine') or {}).get('host')} "
        f"{limits.get('measured')}{where}: memory read {reads or '—'}; a node's limit is the larger of its "
        "bytes at that bandwidth and its FLOPs at its weight type's matrix-product peak",
        markup=False,
    )


def _time_table(title: str, key: str, rows: Sequence[Mapping[str, Any]], waits: bool = False) -> Table:
    """Time per key; with waits, the part of it spent waiting for the other threads."""
    from rich.table import Table

    table = Table(
        key, "count", "time", "share", "mean", *(["of it, waiting"] if waits else []), title=title, title_justify="left"
    )
    for row in rows:
        table.add_row(
            str(row[key]),
            f"{row['count']:,}",
            format_ms(row["time_ns"]),
            f"{row['share']:.1%}",
            f"{row['mean_ns'] / 1e3:,.1f} µs",
            *([format_ms(row["wait_ns"])] if waits else []),
        )
    return table


def render_joined(summary: Mapping[str, Any]) -> None:
    """A joined run's summary (analysis.join.summarize_joined) on standard output."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    head = summary["head"]
    console.print(
        f"[bold]distributed run[/] {summary['experiment_id']}: head {head['run']}, "
        f"{head['graphs']} graphs, {head['time_ns'] / 1e6:.2f} ms in llama calls"
    )
    table = Table("host", "role", "run", "graphs", "compute", "head waited", "clock offset", "status")
    for host in summary["hosts"]:
        offset = (
            (
                f"{host['clock_offset_ns'] / 1e3:+.1f} ± {host['clock_uncertainty_ns'] / 1e3:.1f} µs"
                + ("" if host["clock_consistent"] else " (bounds crossed)")
            )
            if host["role"] == "worker"
            else "—"
        )
        table.add_row(
            host["host"],
            host["role"],
            host["run"],
            str(host["graphs"]),
            f"{host['compute_ns'] / 1e6:.2f} ms",
            f"{host['head_wait_ns'] / 1e6:.2f} ms" if host["role"] == "worker" else "—",
            offset,
            host["status"],
        )
    console.print(table)
    wire = summary["wire"]
    console.print(
        f"wire: {wire['messages']} messages, {wire['bytes'] / 2**20:.2f} MiB in all (the model's upload "
        f"included); during graphs {wire['bytes_during_graphs'] / 2**10:.1f} KiB "
        f"({wire['tensor_bytes_during_graphs'] / 2**10:.1f} KiB of tensors)"
    )
    share = summary["head_idle_share"]
    console.print(
        f"head waited for its workers {summary['head_wait_ns'] / 1e6:.2f} ms"
        + (f" ({share:.0%} of its time in llama calls)" if share is not None else "")
        + f"; beyond their compute (the wire, the protocol): {wire['time_ns'] / 1e6:.2f} ms"
    )
    steps = summary.get("steps") or []
    if steps:
        workers = list(steps[0]["worker_compute_ns"])
        table = Table(
            "one step (median)",
            "graphs",
            "in the llama call",
            "head's own",
            *workers,
            "wire, protocol",
            title="where a step's time goes",
        )
        for step in steps:
            table.add_row(
                step["phase"],
                str(step["graphs"]),
                f"{step['step_ns'] / 1e6:.2f} ms",
                f"{step['head_own_ns'] / 1e6:.2f} ms",
                *(f"{step['worker_compute_ns'].get(w, 0) / 1e6:.2f} ms" for w in workers),
                f"{step['wire_and_protocol_ns'] / 1e6:.2f} ms",
            )
        console.print(table)
    render_devices(summary.get("devices"), console)
    placement = summary.get("placement") or {}
    if placement.get("finding"):
        console.print(f"  • {placement['finding']}", markup=False, highlight=False)
    nodes = summary["remote_nodes"]
    console.print(
        f"remote nodes: {nodes['nodes']} ({nodes['timed']} timed on their worker, "
        f"{nodes['matched_to_head']} matched to the head's graph); slowest worker: {summary['slowest_worker']}"
    )


def render_devices(devices: DeviceSummary | None, console: Console | None = None) -> None:
    """Where a step's time goes per device (analysis.devices.device_summary): per phase, each
    device's busy time and its idle time by cause, the mean step (the parts add up to it)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if not devices or not devices["phases"]:
        return
    console = console or Console()
    table = Table(
        "phase (steps)",
        "device",
        "busy",
        "waits for a device",
        "transfers",
        "launches, scheduling",
        "host",
        "idle",
        title="where a mean step's time goes, per device",
        title_justify="left",
    )
    for phase in devices["phases"]:
        for i, device in enumerate(phase["devices"]):
            parts = device["parts"]
            waits = {
                p.removeprefix("waiting for "): ns
                for p, ns in parts.items()
                if p.startswith("waiting for ") and p != "waiting for transfers"
            }
            waited = "; ".join(f"{escape(other)} {format_ms(ns)}" for other, ns in waits.items()) or "—"
            label = f"{phase['phase']} ({phase['steps']}): {format_ms(phase['step_ns'])}" if i == 0 else ""
            table.add_row(
                label,
                escape(device["device"]),
                format_ms(device["busy_ns"]),
                waited,
                format_ms(parts.get("waiting for transfers", 0.0)),
                format_ms(parts.get("launches and scheduling", 0.0)),
                format_ms(parts.get("host", 0.0)),
                f"{device['idle_share']:.0%}",
            )
    console.print(table)
    if devices.get("finding"):
        console.print(f"  • {devices['finding']}", markup=False, highlight=False)
