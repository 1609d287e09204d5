"""lab/device/make_lock.py's `--drop`: which of the stock wheel's requirements the probe's venv gets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "lab" / "device"))  # make_lock imports dsa_modules beside it
    spec = importlib.util.spec_from_file_location("vc_make_lock", REPO / "lab" / "device" / "make_lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


#: vLLM 0.34.0's Requires-Dist, abridged: a pin PyPI does not serve, one name under two markers, an extra
REQUIRES = [
    'protobuf!=6.30.*,>=5.29.6; platform_machine != "s390x"',
    'protobuf==7.36.1; platform_machine == "s390x"',
    "torch==2.14.0",
    "flashinfer-python==0.7.3",
    "nvidia-cutlass-dsl[cu13]==4.8.0",
    'helion==1.4.0; extra == "helion"',
]


def test_drop_leaves_out_the_named_requirement_and_the_extras_only(monkeypatch):
    make_lock = _load(monkeypatch)
    got = make_lock.venv_requirements(REQUIRES, frozenset({"flashinfer-python"}))
    assert got == REQUIRES[:3] + ["nvidia-cutlass-dsl[cu13]==4.8.0"]
    assert make_lock.pin_of(REQUIRES, "flashinfer-python") == "flashinfer-python==0.7.3"


def test_drop_of_a_name_the_wheel_does_not_require_is_refused(monkeypatch):
    make_lock = _load(monkeypatch)
    with pytest.raises(make_lock.LockError, match=r"--drop flashinfer: not a requirement"):
        make_lock.venv_requirements(REQUIRES, frozenset({"flashinfer"}))
