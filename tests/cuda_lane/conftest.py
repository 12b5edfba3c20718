"""The CUDA lane: every test here runs under the CUDA device profile on CPU tensors, with
Triton in its interpreter (tests/conftest.py sets TRITON_INTERPRET=1 where there is no GPU),
so that the Triton kernels verify inside the real decoding loop. On a GPU only the hardware
differs; there `benchmarks/gpu_e2e.py` runs the real thing."""

import pytest

from mmspec.core.device import forced_profile, triton_installed, triton_interpreted


@pytest.fixture(autouse=True)
def cpu_sized_cost_curve(monkeypatch):
    """auto measures its cost curve up to 65 inputs per row, not the branch sizes (129 to
    1,025) it measures under the CUDA profile: on this CPU those forwards take seconds, and
    the curve they would price changes no token of a keyed decode."""
    from mmspec.decoding.auto import cost_curve

    monkeypatch.setattr(cost_curve, "TREE_SIZES", ())


@pytest.fixture(autouse=True)
def cuda_profile():
    """The lane's tests run under the CUDA profile; `with forced_profile("cpu")` inside a
    test gives a block the CPU's, for the baseline it is compared with."""
    if not (triton_installed() and triton_interpreted()):
        pytest.skip("the CUDA lane runs Triton's interpreter on CPU tensors (TRITON_INTERPRET=1 and triton installed)")
    with forced_profile("cuda"):
        yield


@pytest.fixture
def kernel_calls(monkeypatch) -> dict:
    """Counts the calls of the Triton kernels (`verify_triton`, `verify_keyed_triton`) and of
    the keyed reference (`verify_keyed_reference`, for branch forwards), by name."""
    from mmspec.kernels import verify as dispatch, verify_keyed_triton, verify_triton

    calls = {"verify_triton": 0, "verify_keyed_triton": 0, "verify_keyed_reference": 0}
    for module, name in ((verify_triton, "verify_triton"), (verify_keyed_triton, "verify_keyed_triton"),
                         (dispatch, "verify_keyed_reference")):
        inner = getattr(module, name)

        def counted(*args, _inner=inner, _name=name, **kwargs):
            calls[_name] += 1
            return _inner(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls
