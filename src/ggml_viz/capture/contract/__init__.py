"""The contract between capture's C and its Python: every record layout, number, graph part,
spool frame and setting both sides use, declared once in Python (records.py, constants.py; the
settings in ../settings.py). The build writes the C header from it (../c_header.py); the Python
reads records with the numpy dtypes made from it; the extension and the preload library carry
its digest, so a build from other declarations is refused rather than misread.

Plain Python only: the build imports it before anything else is installed.
"""

from __future__ import annotations

import hashlib

from . import constants, records


def digest() -> str:
    """What the C and the Python must agree on, hashed: the records' fields and the numbers."""
    text = repr(
        (
            [(r.c_name, [(f.name, f.kind, f.count) for f in r.fields]) for r in records.RECORDS],
            [(n.__name__, n._fields) for n in records.NAMED_RECORDS],
            sorted(constants.c_constants().items()),
            sorted(constants.SPOOL_VERSIONS_PARTS.items()),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]
