"""Triton's interpreter, for the CPU lane: the kernels on CPU tensors at a third of the cost.

Under `TRITON_INTERPRET=1` every program of a launch runs in Python, op by op, and two
costs of the interpreter's own dominate our kernels' (measured on `verify_keyed_triton`,
triton 3.5):

- every call of a `@triton.jit` helper patches `triton.language` afresh (an `inspect` walk
  of the module, ~10 ms); the patch is the same each time, so once per function does;
- every integer add and multiply is checked for overflow in int64 (the Philox rounds of
  the keyed noise are mostly that), a check a compiled kernel makes only in debug mode.

`quicken_interpreter()` removes both, for the process. It changes no result (the kernels'
tests compare them with `torch.equal` either way), and does nothing where Triton does not
interpret or its internals differ.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def quicken_interpreter() -> bool:
    """Patches Triton's interpreter as the module docstring says; True where it did."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    patch, builder = getattr(interpreter, "_patch_lang", None), getattr(interpreter, "interpreter_builder", None)
    options = getattr(interpreter, "InterpreterOptions", None)
    if patch is None or builder is None or options is None or getattr(patch, "once", False):
        return False
    patched = set()

    def patch_once(fn):
        if fn not in patched:
            patch(fn)
            patched.add(fn)

    patch_once.once = True
    interpreter._patch_lang = patch_once
    builder.options = options(sanitize_overflow=False)
    logger.debug("Triton's interpreter patches its language once per function and skips overflow checks")
    return True
