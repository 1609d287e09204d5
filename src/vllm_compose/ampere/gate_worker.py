"""The Ampere gate's worker: the subprocess `gate_env.run_in_environment` starts in the gate's own environment.

It checks that the environment is what it was built to be (the pinned torch and Triton, no `vllm` importable),
derives and compiles the tree's DSA-path launches (`gate.derive_and_compile`) and writes the result file the parent
reads. Errors the tool knows are written as data, so the parent raises them again as the same type
(`gate_env._error_of`). Its own module because it imports the gate, which imports `gate_env`: the entry lives
above both, and `gate_env` names it only as the string it runs (`gate_env._BOOT`).

Like the gate, it imports only the standard library, the error base and `gate_env` before the environment is
checked: the gate's environment holds torch and Triton but none of the tool's dependencies.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import traceback
from pathlib import Path

from ..errors import ComposeError
from .gate_env import GateEnvironmentError, _pins, _same


def main() -> None:
    """Run by `gate_env._BOOT` with the request as `sys.argv[2]`: check the environment, gate the tree, write the
    result file. Anything the derivation does not type is written as a `ComposeError` naming what raised it."""
    request = json.loads(sys.argv[2])
    out = Path(request["out"])
    try:
        versions = check_environment(request["requirements"])
        # after the check: the derivation imports torch and Triton, which must be the pinned ones
        from .gate import derive_and_compile

        result = derive_and_compile(
            Path(request["tree"]), request["label"], tuple(tuple(c) for c in request["capabilities"])
        )
        result["environment"] = {"python": sys.executable, "versions": versions}
    except ComposeError as exc:
        result = {"error": {"type": type(exc).__name__, **exc.to_json()}}
    except Exception as exc:  # a failure the derivation does not type: said as the error it is, not as the env's
        where = "".join(traceback.format_exception(exc)[-3:]).strip()
        result = {
            "error": {
                "type": "ComposeError",
                "message": f"the Ampere gate's derivation of {request['label']} failed: {type(exc).__name__}: {exc}",
                "hint": f"the release's code or a driver raised it ({where[-600:]}); "
                "`vllm-compose ampere-gate --tree DIR` reproduces it on the exported tree",
            }
        }
    out.write_text(json.dumps(result))


def check_environment(requirements: list[str]) -> dict[str, str]:
    """The pinned versions as imported; raise `GateEnvironmentError` when one differs or a `vllm` is importable
    (either would make the derivation depend on this environment, not on the release)."""
    versions = {}
    for name, want in _pins(tuple(requirements)).items():
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
        if not _same(versions[name], want):
            raise GateEnvironmentError(
                f"the gate's environment holds {name} {versions[name]}, not the pinned {want}",
                file=sys.prefix,
                hint=f"remove {sys.prefix} to have it rebuilt",
            )
    spec = importlib.util.find_spec("vllm")
    if spec is not None:
        where = spec.origin or ", ".join(spec.submodule_search_locations or [])
        raise GateEnvironmentError(
            f"a vLLM is importable in the gate's environment ({where}): the release must be read from its tree only",
            file=sys.prefix,
            hint=f"remove {sys.prefix} to have it rebuilt with only {', '.join(requirements)}",
        )
    return versions
