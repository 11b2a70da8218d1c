"""Keep PySide6 6.12 from crashing Python 3.11 after a few thousand Qt calls.

PySide6-Essentials 6.12.0 returns None from every void method (and True/False from
Signal.emit and other bool methods) without taking a reference. From Python 3.12 on these
singletons are immortal (PEP 683) and nothing happens; on 3.11 each call drops one reference,
and after about 5,000 calls the interpreter aborts with "Fatal Python error: none_dealloc:
deallocating None" (measured: QLabel.setText, QApplication.processEvents and Signal.emit each
drop exactly one). The singletons are statically allocated and never freed, so giving them a
huge reference count (what 3.12 does with its immortal count) is safe; 2**40 calls would take
days at a million Qt calls a second.
"""

from __future__ import annotations

import ctypes
import sys

_BOOST = 1 << 40


def immortalize_singletons() -> None:
    """Raise the reference counts of None, True and False far above what Qt calls can drop."""
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return
    for singleton in (None, True, False):
        count = ctypes.c_ssize_t.from_address(id(singleton))  # ob_refcnt is the first field
        if count.value < _BOOST // 2:
            count.value += _BOOST
