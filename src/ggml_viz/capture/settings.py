"""What to record and how: one settings object for the API, the CLI and the environment.

Every setting is declared once, as a row of CAPTURE_SETTINGS; the options of `ggml-viz
record` and `run`, the GGML_VIZ_* variables, the keyword arguments of ggml_viz.record and
the README's table of variables are all made from those rows.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .._errors import CaptureError
from .contract.constants import MAX_CAPTURES, NAME_LEN

RECORDERS = ("c", "python")
# Values renamed since runs and scripts used them: still accepted, read as their new names.
RENAMED_VALUES = {"recorder": {"native": "c"}}
DETAILS = ("op", "graph")
TIMINGS = ("inline", "sync")
POLICIES = ("keep-first", "keep-last")
VALUE_MODES = ("off", "stats")
ROUTING_MODES = ("on", "off")
GPU_MODES = ("windows", "every", "off")
DEFAULT_GPU_WINDOW = 4  # computes CUPTI traces in a row, from a graph structure's first
DEFAULT_GPU_PERIOD = 256  # computes between two windows
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


@dataclass(frozen=True)
class NodeSelection:
    """Which nodes are timed on their own (the rest are recorded as structure).

    Filters combine: a node must match every filter given. An empty selection is all nodes.
    """

    ops: tuple[str, ...] = ()  # op names, specific (SWIGLU) or base (GLU)
    layers: tuple[tuple[int, int], ...] = ()  # inclusive layer ranges
    no_layer: bool = False  # also nodes outside any layer (the "none" in --layers)
    names: tuple[str, ...] = ()  # glob patterns on tensor names

    @property
    def is_everything(self) -> bool:
        return not (self.ops or self.layers or self.no_layer or self.names)


DEFAULT_CAPTURE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class ValueSettings:
    """Reading node outputs after they are computed (each such node is computed alone)."""

    stats: bool = False  # --values stats: min, max, mean, std, mean |x|, NaN and Inf counts per node
    captures: tuple[str, ...] = ()  # --capture: name globs of nodes whose whole output is stored
    capture_bytes: int = DEFAULT_CAPTURE_BYTES  # at most this many bytes of captures per run

    @property
    def wanted(self) -> bool:
        return self.stats or bool(self.captures)


@dataclass(frozen=True)
class CaptureSettings:
    recorder: str = "c"  # c (the C recorder, in the extension) or python (its twin: fallback, test oracle)
    detail: str = "op"  # op: time every node; graph: structure and graph times only
    # inline: graphs run in one piece, node times from the CPU backend's per-node callback;
    # sync: each timed node is computed alone and synchronized (exact, any backend, slower)
    timing: str = "inline"
    sample: int | None = None  # time nodes on every N-th decode graph and the first prompt graph
    selection: NodeSelection = field(default_factory=NodeSelection)
    max_events: int | None = None
    policy: str = "keep-first"
    values: ValueSettings = field(default_factory=ValueSettings)
    # mixture-of-experts models: each MoE layer's experts and weights per token, read right after
    # the layer's first MUL_MAT_ID (on the CPU; on a GPU in the GPU timer's windows)
    routing: str = "on"
    # CUDA (CUPTI's kernel records) and Vulkan (ggml-viz's layer's timestamp queries): in windows of
    # graphs, for every graph, or none
    gpu: str = "windows"
    gpu_window: int = DEFAULT_GPU_WINDOW
    gpu_period: int = DEFAULT_GPU_PERIOD

    def __post_init__(self) -> None:
        for value, allowed, what in (
            (self.recorder, RECORDERS, "recorder"),
            (self.detail, DETAILS, "detail"),
            (self.timing, TIMINGS, "timing"),
            (self.policy, POLICIES, "policy"),
            (self.gpu, GPU_MODES, "gpu"),
            (self.routing, ROUTING_MODES, "routing"),
        ):
            if value not in allowed:
                raise CaptureError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
        if self.sample is not None and self.sample < 1:
            raise CaptureError("sample must be 1 or more (time every N-th decode graph)")
        if self.max_events is not None and self.max_events < 1:
            raise CaptureError("max_events must be a positive number of node events")
        if self.gpu_window < 1 or self.gpu_period < 1:
            raise CaptureError("gpu_window and gpu_period must be 1 or more (graph computes)")
        if self.values.capture_bytes < 0:
            raise CaptureError("capture_bytes must be 0 or more")
        if len(self.values.captures) > MAX_CAPTURES or any(len(p.encode()) >= NAME_LEN for p in self.values.captures):
            raise CaptureError(f"capture: at most {MAX_CAPTURES} name patterns of at most {NAME_LEN - 1} bytes")

    def describe(self) -> dict[str, Any]:
        described = asdict(self)
        described["selection"] = {k: list(v) if isinstance(v, tuple) else v for k, v in described["selection"].items()}
        described["values"] = {k: list(v) if isinstance(v, tuple) else v for k, v in described["values"].items()}
        return described


def parse_ops(text: str | None) -> tuple[str, ...]:
    return tuple(op.strip().upper() for op in (text or "").split(",") if op.strip())


def parse_names(values: list[str] | str | None) -> tuple[str, ...]:
    """'attn*,ffn_*' or ['attn*', 'ffn_*'] -> ('attn*', 'ffn_*'): each item may hold several, comma-separated."""
    if values is None:
        return ()
    items = [values] if isinstance(values, str) else values
    return tuple(name.strip() for item in items for name in item.split(",") if name.strip())


def parse_layers(text: str | None) -> tuple[tuple[tuple[int, int], ...], bool]:
    """'0-3,29,none' -> (((0, 3), (29, 29)), True)."""
    ranges: list[tuple[int, int]] = []
    no_layer = False
    for part in (text or "").split(","):
        if not part.strip():
            continue
        if part.strip().lower() == "none":
            no_layer = True
            continue
        match = _RANGE.match(part)
        if not match:
            raise CaptureError(f"layers: {part.strip()!r} is not a layer, a range like 0-3, or 'none'")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if high < low:
            raise CaptureError(f"layers: the range {part.strip()!r} runs backwards")
        ranges.append((low, high))
    return tuple(ranges), no_layer


def selection_from(ops: str | None, layers: str | None, names: list[str] | str | None) -> NodeSelection:
    layer_ranges, no_layer = parse_layers(layers)
    return NodeSelection(ops=parse_ops(ops), layers=layer_ranges, no_layer=no_layer, names=parse_names(names))


def settings_from_environment(env: Mapping[str, str] | None = None) -> CaptureSettings:
    """The settings the GGML_VIZ_* variables of CAPTURE_SETTINGS give (os.environ by default)."""
    env = os.environ if env is None else env
    return settings_from_options(
        {setting.key: setting.from_text(env[setting.env]) for setting in CAPTURE_SETTINGS if setting.env in env}
    )


def values_from(values: str | None, captures: list[str] | str | None, capture_bytes: int | None) -> ValueSettings:
    mode = (values or "off").strip() or "off"
    if mode not in VALUE_MODES:
        raise CaptureError(f"unknown values {mode!r}; choose one of {', '.join(VALUE_MODES)}")
    return ValueSettings(
        stats=mode == "stats",
        captures=parse_names(captures),
        capture_bytes=DEFAULT_CAPTURE_BYTES if capture_bytes is None else capture_bytes,
    )


# The settings as data: one row per setting, from which everything else is made.

Kind = Literal["choice", "count", "number", "list"]


@dataclass(frozen=True)
class Setting:
    """One capture setting: keyword `key` of ggml_viz.record, option --key-name, variable GGML_VIZ_KEY."""

    key: str
    # choice: one of `choices`; count: a whole number of 1 or more; number: a whole number;
    # list: comma-separated items (several options, or a sequence in the API, add up)
    kind: Kind
    default: str | None  # None: not given (every node, no bound, ...)
    help: str  # the option's --help
    doc: str  # the README's text (markdown)
    choices: tuple[str, ...] = ()
    metavar: str | None = None  # the value's name in --help
    example: str | None = None  # the value the README shows; choices or metavar when None
    repeatable: bool = False  # the option may be given several times

    @property
    def renamed(self) -> dict[str, str]:
        """Old values still accepted (choice), by their new names."""
        return RENAMED_VALUES.get(self.key, {})

    @property
    def accepted(self) -> tuple[str, ...]:
        """The choices, and the old names still read as one of them."""
        return self.choices + tuple(self.renamed)

    def current(self, value: Any) -> Any:
        """A value under its current name (an old name of a choice, renamed since)."""
        return self.renamed.get(value, value) if isinstance(value, str) else value

    @property
    def env(self) -> str:
        return "GGML_VIZ_" + self.key.upper()

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def annotation(self) -> str:
        return {"choice": "str", "count": "int | None", "number": "int | None"}.get(
            self.kind, "str | Sequence[str] | None"
        )

    def from_text(self, text: str) -> Any:
        """A GGML_VIZ_* variable's text as the keyword argument's value."""
        if self.kind == "choice":
            return text.strip() or self.default
        if self.kind in ("count", "number"):
            text = text.strip()
            if not text:
                return None
            try:
                return int(text)
            except ValueError:
                raise CaptureError(f"{self.env}={text!r} is not a whole number") from None
        return text

    def to_text(self, value: Any) -> str:
        """A keyword argument's value as the GGML_VIZ_* variable's text."""
        if self.kind == "list" and not isinstance(value, str):
            return ",".join(value)  # several options, or a sequence
        return str(value)


_MIB = DEFAULT_CAPTURE_BYTES // 2**20

CAPTURE_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "detail", "choice", "op", choices=DETAILS,
        help="op: time every node (default); graph: structure and graph times only",
        doc="`op` (default): time every node on its own; `graph`: structure and graph times only",
    ),
    Setting(
        "timing", "choice", "inline", choices=TIMINGS,
        help="inline: graphs run whole, node times from the CPU backend (default, near-free); "
        "sync: each node computed alone and synchronized (exact, any backend, slower)",
        doc="how nodes are timed: `inline` (default, the graph runs whole) or `sync` (each node alone); "
        'see "What is measured, and how"',
    ),
    Setting(
        "sample", "count", None, metavar="N",
        help="time nodes on every N-th decode graph and the first prompt graph only",
        doc="time nodes on every N-th decode graph and the first prompt graph; graph detail otherwise",
    ),
    Setting(
        "ops", "list", None, metavar="OPS", example="MUL_MAT,ROPE",
        help="time only these ops on their own, e.g. MUL_MAT,ROPE",
        doc="time only these ops on their own (specific `SWIGLU` or base `GLU` names)",
    ),
    Setting(
        "layers", "list", None, metavar="LAYERS", example="0-3,29,none",
        help="... only nodes of these layers, e.g. 0-3,29,none",
        doc="… only nodes of these layers (`none`: nodes outside any layer)",
    ),
    Setting(
        "names", "list", None, metavar="GLOB", example="attn*,ffn_*", repeatable=True,
        help="... only nodes whose name matches (repeatable)",
        doc="… only nodes whose tensor name matches one of these globs",
    ),
    Setting(
        "max_events", "count", None, metavar="N",
        help="keep at most N node events (whole graphs)",
        doc="keep at most N node events, whole graphs; the rest are counted as dropped",
    ),
    Setting(
        "policy", "choice", "keep-first", choices=POLICIES,
        help="which graphs --max-events keeps (default: keep-first)",
        doc="which graphs the bound keeps (default `keep-first`)",
    ),
    Setting(
        "values", "choice", "off", choices=VALUE_MODES,
        help="stats: min, max, mean, std, NaN/Inf counts of every node's output (nodes computed alone)",
        doc="`stats`: statistics of every node's output (see \"Tensor values\"); `off` (default)",
    ),
    Setting(
        "capture", "list", None, metavar="GLOB", example="GLOB,…", repeatable=True,
        help="store the whole output of nodes whose name matches (repeatable), e.g. 'kq_soft_max-*'",
        doc="store the whole output of nodes whose name matches one of these globs (`kq_soft_max-*`)",
    ),
    Setting(
        "capture_bytes", "number", None, metavar="N",
        help=f"at most N bytes of captures (default {_MIB} MiB)",
        doc=f"at most N bytes of captures per run (default {_MIB} MiB)",
    ),
    Setting(
        "routing", "choice", "on", choices=ROUTING_MODES,
        help="mixture-of-experts models: record which experts each token chose in each MoE layer, and their "
        "weights (default on)",
        doc="mixture-of-experts models: which experts each token chose, with their weights (`on`, default; "
        'see "Mixture-of-experts models")',
    ),
    Setting(
        "gpu", "choice", "windows", choices=GPU_MODES,
        help="GPU time per node (CUDA: CUPTI's kernel records; Vulkan: timestamp queries), in windows of graphs "
        "(default), for every graph, or off",
        doc="GPU time per node (CUDA: CUPTI's kernel records; Vulkan: ggml-viz's layer's timestamp queries): "
        "`windows` (default; see \"GPU time\"), `every` graph, or `off`",
    ),
    Setting(
        "gpu_window", "count", None, metavar="N",
        help=f"graphs a GPU trace window spans (default {DEFAULT_GPU_WINDOW})",
        doc=f"graphs a GPU trace window spans (default {DEFAULT_GPU_WINDOW})",
    ),
    Setting(
        "gpu_period", "count", None, metavar="N",
        help=f"graphs between two GPU trace windows (default {DEFAULT_GPU_PERIOD}); with --gpu every, "
        "graphs between two hand-overs",
        doc=f"graphs between two GPU trace windows (default {DEFAULT_GPU_PERIOD})",
    ),
    Setting(
        "recorder", "choice", "c", choices=RECORDERS,
        help="c: the C recorder (default); python: its Python twin (slower, for comparison); `native` is read as c",
        doc="the recorder: `c` (default), the C recorder; `python`, its slower Python twin (`native`, its old name,"
        " is read as `c`)",
    ),
)  # fmt: skip
_BY_KEY = {setting.key: setting for setting in CAPTURE_SETTINGS}


@dataclass(frozen=True)
class HookVariable:
    """A variable of the start-up hook that is not a capture setting (the README's table shows them first)."""

    name: str
    value: str
    option: str  # the `ggml-viz run` option that sets it (markdown), or ""
    doc: str
    # text: any (a path); flag: 1, true, yes or on for yes; choice: one of `choices`
    kind: Literal["text", "flag", "choice"] = "text"
    choices: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        return "GGML_VIZ_" + self.name


HOOK_VARIABLES: tuple[HookVariable, ...] = (
    HookVariable(
        "OUTPUT", "PATH", "`-o`",
        "record the program into `PATH`: every llama context it creates, every graph a native one computes"
        " (a Python program's taken name gets `-1`, `-2`, …)",
    ),
    HookVariable("DISABLE", "1", "", "turn it off", kind="flag"),
    HookVariable("VERBOSE", "1", "`-v`", "say what is attached and where the run goes", kind="flag"),
    HookVariable(
        "SPOOL", "PATH", "",
        "native programs: the preload library's spool goes to `PATH` rather than `OUTPUT/spool/PID.spool`",
    ),
    HookVariable(
        "CONTROL", "PATH", "`--dormant`, `--keep-minutes`",
        "native programs: the window control `ggml-viz run` writes (which spool to write, graphs or only each "
        "llama call): set by `ggml-viz run`, not by hand",
    ),
    HookVariable(
        "READ_GRAPHS", "compute", "",
        "read every graph at its compute call, with no eval callback, as on a GPU (a CPU program then keeps "
        "graph times only); `callback`: through the eval callback, the default off a GPU",
        kind="choice", choices=("compute", "callback"),
    ),
    HookVariable(
        "CUPTI", "PATH", "",
        "the `libcupti` to load for GPU times (colon-separated candidates); else the one beside the program's "
        "CUDA runtime, the CUDA toolkit's, or the `nvidia-cuda-cupti` package's",
    ),
    HookVariable(
        "GPU_DETACH", "0", "",
        "keep CUPTI attached between GPU trace windows, its records switched off (it costs more: for comparison)",
        kind="flag",
    ),
)  # fmt: skip

# Applied where the run is written (the bound), or choosing the Python recorder: a native
# program's preload library does not read them.
WRITER_SETTINGS = ("max_events", "policy", "recorder")


def preload_variables() -> list[tuple[str, str, tuple[str, ...]]]:
    """The GGML_VIZ_* variables the preload library reads in a native program, each with its kind
    and choices: what the C's header declares to it (capture/c_header.py)."""
    return [(var.env, var.kind, var.choices) for var in HOOK_VARIABLES] + [
        (setting.env, setting.kind, setting.choices)
        for setting in CAPTURE_SETTINGS
        if setting.key not in WRITER_SETTINGS
    ]


def preload_environment_names() -> tuple[str, ...]:
    """The names of preload_variables() (the C's list, `ggml_viz_preload_settings`, is tested equal to this)."""
    return tuple(env for env, _, _ in preload_variables())


def environment_names() -> tuple[str, ...]:
    """The GGML_VIZ_* variables a recorder reads its capture settings from (a native program's too)."""
    return tuple(setting.env for setting in CAPTURE_SETTINGS)


def check_keys(options: Mapping[str, Any]) -> None:
    """Refuse a keyword that is no capture setting, naming the ones there are."""
    for key in options:
        if key not in _BY_KEY:
            close = difflib.get_close_matches(key, _BY_KEY, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"unknown capture setting {key!r}{hint}; the settings are {', '.join(_BY_KEY)}")


def settings_from_options(options: Mapping[str, Any]) -> CaptureSettings:
    """CaptureSettings from keyword arguments of ggml_viz.record (missing ones, and None, take their defaults)."""
    check_keys(options)
    given = {
        setting.key: setting.current(_given(options.get(setting.key), setting.default)) for setting in CAPTURE_SETTINGS
    }
    for setting in CAPTURE_SETTINGS:
        value = given[setting.key]
        if setting.kind == "list" and value is not None and not isinstance(value, str):
            given[setting.key] = ",".join(value)  # a sequence of items
    return CaptureSettings(
        recorder=given["recorder"],
        detail=given["detail"],
        timing=given["timing"],
        sample=given["sample"],
        selection=selection_from(given["ops"], given["layers"], given["names"]),
        max_events=given["max_events"],
        policy=given["policy"],
        values=values_from(given["values"], given["capture"], given["capture_bytes"]),
        routing=given["routing"],
        gpu=given["gpu"],
        gpu_window=DEFAULT_GPU_WINDOW if given["gpu_window"] is None else given["gpu_window"],
        gpu_period=DEFAULT_GPU_PERIOD if given["gpu_period"] is None else given["gpu_period"],
    )


def _given(value: Any, default: str | None) -> Any:
    return default if value is None else value


def environment_from_options(options: Mapping[str, Any]) -> dict[str, str]:
    """Keyword arguments of ggml_viz.record as GGML_VIZ_* variables (those given, not None)."""
    check_keys(options)
    return {_BY_KEY[key].env: _BY_KEY[key].to_text(value) for key, value in options.items() if value is not None}


def keyword_parameters() -> list[inspect.Parameter]:
    """The settings as keyword-only parameters (for ggml_viz.record's signature)."""
    return [
        inspect.Parameter(
            setting.key, inspect.Parameter.KEYWORD_ONLY, default=setting.default, annotation=setting.annotation
        )
        for setting in CAPTURE_SETTINGS
    ]


def settings_docstring(indent: str = "    ") -> str:
    """One line per setting, `key: doc`, for ggml_viz.record's docstring."""
    return "".join(f"{indent}{setting.key}: {setting.doc}\n" for setting in CAPTURE_SETTINGS)


def settings_markdown_table() -> str:
    """The README's table of GGML_VIZ_* variables (tests/unit/test_settings_table.py compares the two)."""
    rows = ["| variable | `ggml-viz run` option | `ggml-viz.toml` key | effect |", "|---|---|---|---|"]
    rows += [f"| `{var.env}={var.value}` | {var.option or '—'} | — | {var.doc} |" for var in HOOK_VARIABLES]
    for setting in CAPTURE_SETTINGS:
        value = setting.example or "\\|".join(setting.choices) or setting.metavar
        option = f"`{setting.flag}`" + (" (repeatable)" if setting.repeatable else "")
        rows.append(f"| `{setting.env}={value}` | {option} | `{setting.key}` | {setting.doc} |")
    return "\n".join(rows) + "\n"
