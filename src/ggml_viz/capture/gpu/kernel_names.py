"""Kernel names as people read them: CUPTI gives the mangled C++ symbol
(`_Z13quantize_q8_1PKfPvlllllj5uint3`); the run keeps it demangled (`name`) and the
function alone (`kernel`: quantize_q8_1), which is what a table of kernels groups by."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Any

# CUPTI's copyKind
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
              10: "PtoP"}  # fmt: skip


@cache
def _demangler() -> tuple[Any, Any] | None:
    """libstdc++'s __cxa_demangle, and free for what it returns (None where there is none)."""
    try:
        cxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    demangle = cxx.__cxa_demangle
    demangle.restype = ctypes.c_void_p
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = libc.free
    free.argtypes = [ctypes.c_void_p]
    return demangle, free


@cache
def demangle(symbol: str) -> str:
    """The C++ symbol demangled (as c++filt shows it); itself when it is not mangled."""
    functions = _demangler()
    if functions is None or not symbol.startswith("_Z"):
        return symbol
    demangle_, free = functions
    status = ctypes.c_int(-1)
    result = demangle_(symbol.encode(), None, None, ctypes.byref(status))
    if not result:
        return symbol
    try:
        return ctypes.string_at(result).decode("utf-8", "replace") if status.value == 0 else symbol
    finally:
        free(result)


@cache
def kernel_function(symbol: str) -> str:
    """The function's own name: no return type, template arguments, parameters or namespaces."""
    name = demangle(symbol).replace("(anonymous namespace)", "anonymous")
    depth, cut = 0, len(name)
    for i, char in enumerate(name):  # the first '<' or '(' outside brackets ends the name
        if char in "<(" and depth == 0 and not name[:i].endswith("operator"):
            cut = i
            break
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(char, 0)
    head = name[:cut].strip()
    head = head.rsplit(" ", 1)[-1]  # the return type before it
    return head.rsplit("::", 1)[-1] or name
