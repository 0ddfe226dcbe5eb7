"""Graphs shaped like llama.cpp's, made without a model: ggml_tensor structs written into memory
as ggml lays them out (ggml_api.TENSOR_DTYPE), their data in real ggml CPU buffers over numpy
memory, and fed to a recorder's callbacks the way ggml's scheduler and CPU backend call them.
Only libggml-base is called (to describe buffers, name ops): no graph is computed, the data a
node "computes" is written before it runs."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ggml_viz.capture.core import ggml_api
from ggml_viz.capture.core.ggml_api import TENSOR_DTYPE, TENSOR_SIZE, cpu_walk_ops, libggml, routing_ops

F32, F16, I32 = 0, 1, 26  # ggml_type ids
_ITEM = {F32: np.float32, F16: np.float16, I32: np.int32}
WEIGHTS, COMPUTE = 1, 2  # ggml_backend_buffer_usage


# Tensor names as programs give them, for the readers of a name's layer
NAMES = [
    "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "blk.x.weight", "blk.12", "Qcur-12", "Kcur-3 (view)",
    "kqv_out-7 (permuted) (cont)", "cache_k_l4", "cache_v_l17 (view)", "token_embd.weight", "result_output",
    "inp_embd", "norm", "", "a-b-3", "x-12y", "x_l", "x_l5-6", "ffn_out-29", "leaf_3", "node_-1", "-7",
    "a" * 63, "blk.3.x-5", "encoder.blocks.3.attn.query.weight", "decoder.blocks.12.mlp.0.bias", "blocks.2.x",
    "model.layers.7.self_attn.q_proj.weight", "h.4.mlp.c_fc.weight", "transformer.h.11.attn.weight", "xblocks.3.y",
    "blocks.x.3", "h.5", "encoder.blocks.3", "blocks.3.x-5", "a.h.2.blocks.9.x",
]  # fmt: skip


@dataclass(frozen=True)
class Op:
    """An op as a struct holds it: its number and, for UNARY and GLU, its specific op (op_params[0])."""

    op: int
    param: int = 0


def _probe(build: Any) -> tuple[Op, ...]:
    lib = libggml()
    params = ggml_api._InitParams(mem_size=16 * int(lib.ggml_tensor_overhead()), mem_buffer=None, no_alloc=True)
    ctx = lib.ggml_init(params)
    try:
        source = lib.ggml_new_tensor_2d(ctx, F32, 8, 2)
        structs = [np.frombuffer(ctypes.string_at(t, TENSOR_SIZE), TENSOR_DTYPE)[0] for t in build(lib, ctx, source)]
        return tuple(Op(int(s["op"]), int(s["op_params"][0])) for s in structs)
    finally:
        lib.ggml_free(ctx)


class Ops:
    """The op numbers of the loaded ggml (they change between versions), by name."""

    def __init__(self) -> None:
        walk, routing = cpu_walk_ops(), routing_ops()
        self.none = Op(0)
        self.reshape, self.view, self.permute, self.transpose = (Op(op) for op in walk.empty[1:])
        self.mul, self.mul_mat_id, self.get_rows = Op(walk.mul), Op(routing.mul_mat_id), Op(routing.get_rows)
        self.add, self.mul_mat, self.silu = _probe(
            lambda lib, ctx, x: (lib.ggml_add(ctx, x, x), lib.ggml_mul_mat(ctx, x, x), lib.ggml_silu(ctx, x))
        )
        self.empty = walk.empty  # ops the CPU backend skips: no tick


class Buffer:
    """A real ggml CPU buffer over numpy memory, of one usage; tensors' data are placed in it in turn."""

    def __init__(self, usage: int, size: int = 1 << 16) -> None:
        lib = libggml()
        lib.ggml_backend_buffer_set_usage.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.ggml_backend_buffer_set_usage.restype = None
        self.memory = np.zeros(size + 64, dtype=np.uint8)
        self.base = (self.memory.ctypes.data + 63) // 64 * 64  # ggml wants its buffers aligned
        self.handle = int(lib.ggml_backend_cpu_buffer_from_ptr(self.base, size))
        self.size = size
        lib.ggml_backend_buffer_set_usage(self.handle, usage)
        self.used = 0

    def place(self, nbytes: int) -> int:
        at = self.used
        self.used += (nbytes + 31) // 32 * 32
        assert self.used <= len(self.memory) - 64, "the buffer is full"
        return self.base + at

    def free(self) -> None:
        libggml().ggml_backend_buffer_free(self.handle)


class TensorMemory:
    """ggml_tensor structs at fixed addresses (a context's memory), never moved."""

    def __init__(self, capacity: int = 256) -> None:
        self.structs = np.zeros(capacity, dtype=TENSOR_DTYPE)
        self.base = self.structs.ctypes.data
        self.count = 0

    def tensor(
        self,
        name: str,
        op: Op,
        ggml_type: int = F32,
        ne: Sequence[int] = (1,),
        sources: Sequence[int] = (),
        buffer: Buffer | None = None,
        view_of: int = 0,
        view_offs: int = 0,
        nb: Sequence[int] | None = None,
        flags: int = 0,
        values: Any = None,
    ) -> int:
        """A new tensor struct (its address): data placed in `buffer` (a view: in its source's
        data), `values` written there."""
        assert self.count < len(self.structs), "the tensor memory is full"
        row = self.structs[self.count : self.count + 1]
        shape = [*ne, 1, 1, 1][:4]
        item = np.dtype(_ITEM[ggml_type]).itemsize
        strides = list(nb) if nb is not None else [item, *(item * np.cumprod(shape[:3])).tolist()]
        row["type"], row["ne"], row["nb"], row["op"] = ggml_type, shape, strides, op.op
        row["op_params"][0, 0], row["flags"] = op.param, flags
        row["src"][0, : len(sources)] = sources
        row["name"] = name.encode()
        nbytes = item + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if view_of:
            source = np.frombuffer(ctypes.string_at(view_of, TENSOR_SIZE), TENSOR_DTYPE)[0]
            row["view_src"], row["view_offs"] = view_of, view_offs
            row["buffer"], row["data"] = source["buffer"], int(source["data"]) + view_offs
        elif buffer is not None:
            row["buffer"], row["data"] = buffer.handle, buffer.place(nbytes)
        if values is not None:
            data = np.ascontiguousarray(values, dtype=_ITEM[ggml_type]).view(np.uint8).ravel()
            ctypes.memmove(int(row["data"][0]), data.ctypes.data, len(data))
        self.count += 1
        return self.base + (self.count - 1) * TENSOR_SIZE

    def struct(self, address: int) -> np.void:
        return self.structs[(address - self.base) // TENSOR_SIZE]

    def set_name(self, address: int, name: bytes) -> None:
        """Write a name field whole (stale bytes after its NUL, as a renamed tensor keeps)."""
        offset = address - self.base + ggml_api.NAME_OFFSET
        self.structs.view(np.uint8)[offset : offset + len(name)] = np.frombuffer(name, np.uint8)


@dataclass
class Callbacks:
    """A recorder's callbacks as llama.cpp gets them: the eval callback, its user data, the abort callback."""

    eval: Any
    abort: Any
    user_data: Any

    @classmethod
    def of(cls, recorder: Any) -> Callbacks:
        return cls(recorder.callback, recorder.abort_callback, recorder.user_data)


def struct_at(address: int) -> np.void:
    """A copy of the tensor struct at this address."""
    return np.frombuffer(ctypes.string_at(address, TENSOR_SIZE), TENSOR_DTYPE)[0]


def compute(callbacks: Callbacks, nodes: Sequence[int], ops: Ops) -> None:
    """Compute a graph as ggml's scheduler does with an eval callback (ggml_backend_sched_compute_splits):
    ask about nodes in turn until one is wanted, compute the slice ending with it (the CPU backend
    calling the abort callback after each node it works on: not views), then call back for it."""
    first = 0
    for index, node in enumerate(nodes):
        wanted = bool(callbacks.eval(node, True, callbacks.user_data))
        if wanted or index == len(nodes) - 1:
            for computed in nodes[first : index + 1]:
                if int(struct_at(computed)["op"]) not in ops.empty:
                    callbacks.abort(callbacks.user_data)
            if wanted:
                assert callbacks.eval(node, False, callbacks.user_data), "a result callback must answer True"
            first = index + 1


@dataclass
class LayerGraph:
    """A llama-like graph: its nodes in order, the tensors by name, and what it was built in."""

    nodes: list[int]
    tensors: dict[str, int]
    memory: TensorMemory

    def __getitem__(self, name: str) -> int:
        return self.tensors[name]


class Model:
    """The leaves of a two-layer model, one layer a mixture of experts: weights (one left
    unnamed), a KV cache, and the buffers they lie in."""

    N_EMBD, N_EXPERT, N_USED = 8, 4, 2

    def __init__(self, n_tokens: int = 2) -> None:
        self.ops = Ops()
        self.weights, self.cache, self.compute = Buffer(WEIGHTS), Buffer(0), Buffer(COMPUTE)
        self.leaves = TensorMemory()
        rng = np.random.default_rng(3)
        e, experts = self.N_EMBD, self.N_EXPERT
        leaf, t = self.ops.none, self.leaves.tensor
        self.tensors = {
            "token_embd.weight": t("token_embd.weight", leaf, F16, (e, 32), buffer=self.weights),
            "blk.0.attn_norm.weight": t("blk.0.attn_norm.weight", leaf, F32, (e,), buffer=self.weights),
            "blk.0.attn_q.weight": t("blk.0.attn_q.weight", leaf, F16, (e, e), buffer=self.weights),
            "blk.0.ffn_up.weight": t("", leaf, F16, (e, e), buffer=self.weights),  # unnamed (whisper.cpp's leaf_N)
            "cache_k_l0": t("cache_k_l0", leaf, F16, (e, 16), buffer=self.cache, values=rng.normal(size=(16, e))),
            "blk.1.ffn_gate_inp.weight": t("blk.1.ffn_gate_inp.weight", leaf, F32, (e, experts), buffer=self.weights),
            "blk.1.ffn_up_exps.weight": t("blk.1.ffn_up_exps.weight", leaf, F16, (e, e, experts), buffer=self.weights),
            "output.weight": t("output.weight", leaf, F16, (e, 32), buffer=self.weights),
        }
        self.n_tokens = n_tokens

    def free(self) -> None:
        for buffer in (self.weights, self.cache, self.compute):
            buffer.free()

    def graph(self, n_cached: int = 4, memory: TensorMemory | None = None, first_name: str = "inp_embd") -> LayerGraph:
        """One forward graph over n_tokens tokens, with n_cached cells of the KV cache in view.
        Its outputs hold values (NaN and Inf among them), as if computed already."""
        memory = memory or TensorMemory()
        o, m, w, n, e = self.ops, memory.tensor, self.tensors, self.n_tokens, self.N_EMBD
        c = self.compute
        rng = np.random.default_rng(n_cached)
        halves = lambda *shape: rng.integers(-8, 8, size=shape[::-1]) / 2  # noqa: E731 - exact in f16 and in sums
        x: dict[str, int] = {}
        x["inp_tokens"] = m("inp_tokens", o.none, I32, (n,), buffer=c, values=np.arange(n) + 5)
        x[first_name] = m(
            first_name, o.get_rows, F32, (e, n), (w["token_embd.weight"], x["inp_tokens"]), c, values=halves(e, n)
        )
        x["attn_norm-0"] = m(
            "attn_norm-0",
            o.mul,
            F32,
            (e, n),
            (x[first_name], w["blk.0.attn_norm.weight"]),
            c,
            values=np.where(np.eye(n, e) > 0, np.nan, halves(e, n)),
        )
        x["Qcur-0"] = m(
            "Qcur-0",
            o.mul_mat,
            F32,
            (e, n),
            (w["blk.0.attn_q.weight"], x["attn_norm-0"]),
            c,
            values=np.full((n, e), np.inf),
        )
        x["Qcur-0 (reshaped)"] = m(
            "Qcur-0 (reshaped)", o.reshape, F32, (e // 2, 2, n), (x["Qcur-0"],), view_of=x["Qcur-0"]
        )
        x["k-0"] = m(
            "k-0",
            o.view,
            F16,
            (e, n_cached),
            (w["cache_k_l0"],),
            view_of=w["cache_k_l0"],
            view_offs=2 * e * 2,
            nb=(2, 2 * e, 2 * e * n_cached, 2 * e * n_cached),
        )
        x["kq-0"] = m("kq-0", o.mul_mat, F32, (n_cached, n), (x["k-0"], x["Qcur-0"]), c, values=halves(n_cached, n))
        x["kq-0 (transposed)"] = m(
            "kq-0 (transposed)",
            o.transpose,
            F32,
            (n, n_cached),
            (x["kq-0"],),
            view_of=x["kq-0"],
            nb=(4 * n_cached, 4, 4 * n * n_cached, 4 * n * n_cached),
        )
        x["ffn_up-0"] = m(
            "ffn_up-0", o.mul_mat, F16, (e, n), (w["blk.0.ffn_up.weight"], x["attn_norm-0"]), c, values=halves(e, n)
        )
        x["ffn_silu-0"] = m("ffn_silu-0", o.silu, F32, (e, n), (x["ffn_up-0"],), c, values=halves(e, n))
        x["l_out-0"] = m("l_out-0", o.add, F32, (e, n), (x["ffn_silu-0"], x[first_name]), c, values=halves(e, n))
        # layer 1: a mixture of experts, as llama.cpp builds it (build_moe_ffn)
        k, experts = self.N_USED, self.N_EXPERT
        probs_of = (w["blk.1.ffn_gate_inp.weight"], x["l_out-0"])
        x["ffn_moe_probs-1"] = m(
            "ffn_moe_probs-1", o.mul_mat, F32, (experts, n), probs_of, c, values=halves(experts, n)
        )
        chosen = np.array([[(token + slot) % experts for slot in range(k)] for token in range(n)])
        # (argsort's top k, a view in llama.cpp: here a tensor of its own)
        x["ffn_moe_topk-1"] = m("ffn_moe_topk-1", o.add, I32, (k, n), (x["ffn_moe_probs-1"],), c, values=chosen)
        x["ffn_moe_weights-1"] = m(
            "ffn_moe_weights-1",
            o.get_rows,
            F32,
            (1, k, n),
            (x["ffn_moe_probs-1"], x["ffn_moe_topk-1"]),
            c,
            values=halves(1, k, n),
        )
        x["ffn_moe_weights_norm-1"] = m(
            "ffn_moe_weights_norm-1",
            o.mul,
            F32,
            (1, k, n),
            (x["ffn_moe_weights-1"], x["ffn_moe_weights-1"]),
            c,
            values=(np.arange(n * k).reshape(n, k, 1) + 1) / 8,
        )
        x["ffn_moe_up-1"] = m(
            "ffn_moe_up-1",
            o.mul_mat_id,
            F32,
            (e, k, n),
            (w["blk.1.ffn_up_exps.weight"], x["l_out-0"], x["ffn_moe_topk-1"]),
            c,
            values=halves(e, k, n),
        )
        x["ffn_moe_down-1"] = m(
            "ffn_moe_down-1",
            o.mul_mat_id,
            F32,
            (e, k, n),
            (w["blk.1.ffn_up_exps.weight"], x["ffn_moe_up-1"], x["ffn_moe_topk-1"]),
            c,
            values=halves(e, k, n),
        )
        output = 2  # GGML_TENSOR_FLAG_OUTPUT
        x["result_output"] = m(
            "result_output",
            o.mul_mat,
            F32,
            (32, n),
            (w["output.weight"], x["ffn_moe_down-1"]),
            c,
            values=halves(32, n),
            flags=output,
        )
        nodes = [address for name, address in x.items() if name != "inp_tokens"]
        return LayerGraph(nodes, {**w, **x}, memory)
