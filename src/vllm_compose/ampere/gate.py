"""The Ampere gate of a release tree: its DSA-path kernel launches, derived on a CPU, compiled for sm_80 and sm_86.

`derive_and_compile` runs `kernel_launches.derive_launches` for each Ampere capability (the release's own
capability choices differ between sm_80 and sm_86 only where its code asks), deduplicates the specializations and
compiles them with `kernel_gate.run_gate` for that capability's target. `gate_in_environment` is the gate as the
commands run it: that step in the tool's own environment (`gate_env`: pinned torch and Triton, nothing else
importable), the impl contracts read here, and the counts checked against the release's record (`coverage_record`):
a run that reaches less than the recorded one fails. `gate_tree` is the same in this interpreter, for the tests,
which run in an environment holding the same pins. `export_revision` writes a compose branch or a release tag of a
git repository to a folder, as the loader reads plain files. `recorded_coverage` compares the derived kernel names
with a GPU recording (`recordings/composed-v0.26.0-sm80.json`, package data): the recording holds every Triton
kernel of the runs, the runner and sampler kernels too, which are outside the DSA path and not derived here.

This module imports only the standard library, the error base and the derivation at module level: the worker runs
it in the gate's environment, which holds torch and Triton but none of the tool's dependencies.
"""

from __future__ import annotations

import importlib.resources
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .facts import CAPABILITIES, compile_target
from .kernel_gate import GateResult, load_records, run_gate
from .kernel_launches import Derivation, DriverOutcome, derive_launches, release_loader

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..trees import FileTree
    from .coverage_record import CoverageCheck
    from .impl_contract import BackendContract

#: module suffixes of the recorded kernels on the DSA path (recordings/composed-v0.26.0-sm80.json); the others there
#: are the V2 model runner's and the sampler's kernels
DSA_PATH_MODULES = (
    "mqa_logits_triton",
    "triton_mla_sparse_kernel",
    "sparse_utils",
    "backends.mla.indexer",
    "fused_moe",
)


@dataclass
class KernelVerdict:
    """One kernel on one target: how many derived specializations, and whether all compiled."""

    module: str
    qualname: str
    target: int
    specializations: int
    failed: int
    reason: str | None

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "qualname": self.qualname,
            "target": f"sm_{self.target}",
            "specializations": self.specializations,
            "failed": self.failed,
            "ok": self.ok,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelVerdict:
        target = int(str(d["target"]).removeprefix("sm_"))
        return cls(d["module"], d["qualname"], target, d["specializations"], d["failed"], d["reason"])


@dataclass
class AmpereGateReport:
    """The gate of one tree: per kernel and target, the drivers' outcomes, and the coverage of a recording."""

    label: str
    kernels: list[KernelVerdict] = field(default_factory=list)
    drivers: dict[str, list[DriverOutcome]] = field(default_factory=dict)
    derived: dict[str, int] = field(default_factory=dict)
    coverage: dict[str, Any] | None = None
    #: the methods the DSA path calls on an impl, against each Ampere sparse-MLA backend's impl (`impl_contract`)
    contracts: list[BackendContract] = field(default_factory=list)
    #: the counts against the release's record (`coverage_record`); None when the tree was not named as a release
    coverage_check: CoverageCheck | None = None
    #: where the derivation ran: the gate environment's interpreter and its torch / Triton versions
    environment: dict[str, Any] | None = None
    #: whether the tree relays the IndexCache top-k across PP stages, as the caller's reader found it
    #: (`pp.topk_relay.TopkCrossing`, see `gate_release`); reported, not judged
    topk_relay: Any = None
    #: the DSA-path kernels' pointer offsets that multiply 32-bit values (int32_offsets.Int32Offset), from the
    #: tree's source and the derived launches' argument types; reported, not judged
    int32_offsets: list[Any] = field(default_factory=list)

    @property
    def missing_methods(self) -> list[tuple[str, str, str]]:
        """(backend, method, first call site) for each method an impl lacks that the path calls unconditionally."""
        return [(c.backend, a.name, a.sites[0].site) for c in self.contracts for a in c.missing]

    @property
    def compiles(self) -> bool:
        """Every derived specialization compiles and every impl answers: the gate's verdict before its reach."""
        return bool(self.kernels) and all(k.ok for k in self.kernels) and not self.missing_methods

    @property
    def ok(self) -> bool:
        return self.compiles and (self.coverage_check is None or self.coverage_check.ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "tree": self.label,
            "ok": self.ok,
            "kernels": [k.to_dict() for k in self.kernels],
            "drivers": {cap: [o.to_dict() for o in outs] for cap, outs in self.drivers.items()},
            "specializations": self.derived,
            "coverage": self.coverage,
            "impl_contracts": [c.to_json() for c in self.contracts],
            "coverage_check": self.coverage_check.to_json() if self.coverage_check else None,
            "environment": self.environment,
            "topk_relay": self.topk_relay.to_json() if self.topk_relay is not None else None,
            "int32_offsets": [o.to_json() for o in self.int32_offsets],
        }


def _verdicts(records: list[dict[str, Any]], results: list[GateResult], target: int) -> list[KernelVerdict]:
    per: dict[tuple[str, str], list[tuple[dict[str, Any], GateResult]]] = {}
    for rec, res in zip(records, results, strict=True):
        per.setdefault((rec["module"], rec["qualname"]), []).append((rec, res))
    out = []
    for (module, qualname), pairs in per.items():
        bad = [(rec, res) for rec, res in pairs if not res.ok]
        reason = None
        if bad:
            # the drivers whose launches fail: "indexer JIT warm-up" says the engine stops at start-up
            drivers = list(dict.fromkeys(name for rec, _ in bad for name in rec.get("drivers", ())))
            reason = bad[0][1].error + (f" (launched by: {'; '.join(drivers)})" if drivers else "")
        out.append(KernelVerdict(module, qualname, target, len(pairs), len(bad), reason))
    return out


def _dsa_signatures(records: list[dict[str, Any]], into: dict[str, dict[str, str]]) -> None:
    """Each DSA-path kernel's argument types over its derived launches; an argument any launch passes as i32 stays
    i32 (that launch computes its offsets in 32 bits)."""
    for rec in records:
        if not rec["module"].endswith(DSA_PATH_MODULES):
            continue
        sig = into.setdefault(f"{rec['module']}.{rec['qualname']}", {})
        for arg, typ in (rec.get("specialization", {}).get("signature") or {}).items():
            if sig.get(arg) != "i32":
                sig[arg] = typ


def derive_and_compile(
    tree: Path, label: str = "", capabilities: tuple[tuple[int, int], ...] = CAPABILITIES
) -> dict[str, Any]:
    """Derive and compile the DSA-path launches of the tree `tree` (the folder holding `vllm/`) in this
    interpreter: per kernel and target the verdicts, per target the drivers' outcomes and the distinct
    specializations (JSON-ready: the gate's worker sends it back as it is)."""
    kernels: list[KernelVerdict] = []
    drivers: dict[str, list[dict[str, Any]]] = {}
    derived: dict[str, int] = {}
    signatures: dict[str, dict[str, str]] = {}
    for cap in capabilities:
        derivation: Derivation = derive_launches(tree, cap, label=label)
        target, warp_size = compile_target(cap)
        loader = release_loader(tree, cap)  # kernels defined in classes load only where Python executes
        try:
            results = run_gate(derivation.records, tree, targets=((target, warp_size),), loader=loader)
        finally:
            loader.close()
        kernels += _verdicts(derivation.records, results, target)
        _dsa_signatures(derivation.records, signatures)
        drivers[f"sm_{target}"] = [o.to_dict() for o in derivation.outcomes]
        derived[f"sm_{target}"] = len(derivation.records)
    kernels.sort(key=lambda k: (k.module, k.qualname, k.target))
    return {"kernels": [k.to_dict() for k in kernels], "drivers": drivers, "derived": derived, "signatures": signatures}


def _report(label: str, result: dict[str, Any], tree: Path) -> AmpereGateReport:
    from ..trees import DirTree
    from .impl_contract import impl_contracts
    from .int32_offsets import scan_tree

    report = AmpereGateReport(label or str(tree))
    report.kernels = [KernelVerdict.from_dict(k) for k in result["kernels"]]
    report.drivers = {t: [DriverOutcome(**o) for o in outs] for t, outs in result["drivers"].items()}
    report.derived = dict(result["derived"])
    report.environment = result.get("environment")
    report.contracts = impl_contracts(DirTree(tree))
    report.int32_offsets = scan_tree(DirTree(tree), result.get("signatures", {}))
    return report


def gate_tree(
    tree: Path, label: str = "", capabilities: tuple[tuple[int, int], ...] = CAPABILITIES
) -> AmpereGateReport:
    """The gate of the tree `tree` in this interpreter, without the coverage check (the tests' entry: their
    environment holds the gate's pins; the commands use `gate_in_environment`)."""
    return _report(label, derive_and_compile(Path(tree), label, capabilities), Path(tree))


def prepare_environment(progress=None):
    """The gate's environment under the cache (`gate_env`), created when it is not there yet; raises
    `GateEnvironmentError` (exit 3) when it cannot be."""
    from ..cache import default_cache_root
    from .gate_env import ensure_environment, environment_for

    return ensure_environment(environment_for(default_cache_root()), progress=progress)


def gate_in_environment(
    tree: Path,
    label: str = "",
    release: tuple[str, str] | None = None,
    progress=None,
    record_file: Path | None = None,
) -> AmpereGateReport:
    """The gate of `tree` as the commands run it: derived and compiled in the tool's own environment (created on
    first use), the impl contracts, and, when `release` names the tree as (tag, "composed" | "stock"), its counts
    against that release's record. Raises `GateEnvironmentError` (exit 3) when the environment cannot be made."""
    from . import coverage_record
    from .gate_env import _pins, run_in_environment

    env = prepare_environment(progress)
    report = _report(label, run_in_environment(env, Path(tree), label, CAPABILITIES), Path(tree))
    if release is not None:
        record = coverage_record.load_record(record_file or coverage_record.RECORD_FILE)
        report.coverage_check = coverage_record.check(report, *release, _pins(env.requirements), record)
    return report


def recorded_coverage(report: AmpereGateReport, recorded: Path) -> dict[str, Any]:
    """Which kernels of a GPU recording the derivation covers: the DSA-path ones must all be derived; the rest of
    the recording (runner, sampler) is outside the DSA path and listed as such."""
    names = {(r["module"], r["qualname"]) for r in load_records(recorded)}
    derived = {(k.module, k.qualname) for k in report.kernels}
    on_path = sorted(n for n in names if n[0].endswith(DSA_PATH_MODULES))
    return {
        "recording": str(recorded),
        "dsa_path": [".".join(n) for n in on_path],
        "covered": [".".join(n) for n in on_path if n in derived],
        "missing": [".".join(n) for n in on_path if n not in derived],
        "outside_dsa_path": len(names) - len(on_path),
    }


def tree_version(tree: Path) -> str | None:
    """The release version a tree's `vllm/_version.py` records, when it does."""
    path = Path(tree) / "vllm" / "_version.py"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        # `__version__ = version = '0.26.0'` (vcs-versioning)
        if line.startswith(("__version__ =", "version =")):
            value = line.rsplit("=", 1)[1].strip().strip("'\"")
            if value and value[0].isdigit():
                return value
    return None


def export_revision(repo_dir: Path, rev: str, dest: Path) -> Path:
    """Write the `vllm/` files of revision `rev` (a branch or tag) of the repository to `dest`; return `dest`."""
    from .. import gitstore
    from ..trees import GitTree, export_tree

    return export_tree(GitTree.from_revision(gitstore.open_or_init_repo(repo_dir, create=False), rev), dest)


def require_gate(tree: Path, label: str, tag: str | None = None) -> AmpereGateReport:
    """The gate of `tree`, the compose of release `tag`, for an artifact about to be built from it: raise
    `RefusedError` (exit 2) when a kernel fails to compile for sm_80/86, an impl lacks a method, or the run reaches
    less (or more) than the release's record; `GateEnvironmentError` (exit 3) when the gate's environment cannot
    be made. Return the passing report."""
    from ..errors import RefusedError

    report = gate_in_environment(Path(tree), label=label, release=(tag, "composed") if tag else None)
    if not report.ok:
        failed = sorted({f"{k.qualname} (sm_{k.target}): {k.reason}" for k in report.kernels if not k.ok})
        failed += [f"{b}'s impl has no {m}(), which {site} calls" for b, m, site in report.missing_methods]
        check = report.coverage_check
        if check is not None and not check.ok:
            failed += [f"coverage {check.state}: " + "; ".join(d.line() for d in check.differences[:2])]
        shown = "; ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
        hint = (
            "add a skew-fix entry that makes the kernel compile below sm_89 (or gives the impl the method) and "
            "compose again; "
        )
        if check is not None and not check.ok and report.compiles:
            hint = " ".join(check.lines()[1:]).strip() + "; "
        raise RefusedError(
            f"{label} fails the Ampere gate: {shown}",
            hint=hint + "`vllm-compose ampere-gate` shows every kernel; no artifact was built",
        )
    return report


def render(report: AmpereGateReport) -> str:
    """One line per kernel and target, the drivers' outcomes, the coverage, then the verdict."""
    lines = []
    for k in report.kernels:
        state = "ok" if k.ok else f"FAIL ({k.failed}/{k.specializations}): {k.reason}"
        lines.append(f"{k.module} {k.qualname} sm_{k.target} x{k.specializations} {state}")
    for target, outcomes in report.drivers.items():
        for o in outcomes:
            if o.status == "ran":
                lines.append(f"driver {target}: {o.driver}: {o.launches} launches")
            else:
                lines.append(f"driver {target}: {o.driver}: {o.status}: {o.reason}")
    if report.coverage is not None:
        c = report.coverage
        lines.append(
            f"coverage of {Path(c['recording']).name}: {len(c['covered'])}/{len(c['dsa_path'])} DSA-path kernels "
            f"derived" + (f", missing {', '.join(c['missing'])}" if c["missing"] else "")
        )
        lines.append(
            f"  {c['outside_dsa_path']} recorded kernels (model runner, sampler) are outside the DSA path: not derived"
        )
    for c in report.contracts:
        lines += c.lines()
    if report.environment is not None:
        versions = ", ".join(f"{n} {v}" for n, v in report.environment.get("versions", {}).items())
        lines.append(f"derived in the gate's environment {Path(report.environment['python']).parents[1]} ({versions})")
    if report.topk_relay is not None:
        lines.append(f"PP top-k relay (IndexCache, not judged by this gate): {report.topk_relay.summary()}")
    lines += int32_offset_lines(report.int32_offsets)
    check = report.coverage_check
    if check is not None:
        lines += check.lines()
    kernels = Counter(k.ok for k in report.kernels)
    specs = ", ".join(f"{n} specializations for {t}" for t, n in report.derived.items())
    verdict = "PASS" if report.ok else "FAIL"
    missing = len(report.missing_methods)
    reach = f"; coverage {check.state}" if check is not None else "; coverage unchecked (no release named)"
    lines.append(
        f"{verdict}: {report.label}: {kernels[True]} kernel x target compile, {kernels[False]} fail ({specs})"
        + (f"; {missing} impl method(s) MISSING" if missing else "")
        + reach
    )
    return "\n".join(lines) + "\n"


def int32_offset_lines(offsets: list[Any]) -> list[str]:
    """The int32 offsets per kernel: which pointer each offsets and the 32-bit arguments it multiplies."""
    if not offsets:
        return ["int32 offsets (not judged by this gate): none on the DSA path"]
    per: dict[str, list[str]] = {}
    for o in offsets:
        per.setdefault(o.kernel.split(":", 1)[-1], []).append(f"{o.pointer} ({' x '.join(o.arguments)})")
    lines = [
        f"int32 offsets (not judged by this gate; safe while the tensor stays below 2**31 elements): {len(offsets)}"
    ]
    lines += [f"  {kernel}: {', '.join(dict.fromkeys(items))}" for kernel, items in sorted(per.items())]
    return lines


def write_report(path: Path, report: AmpereGateReport) -> None:
    Path(path).write_text(json.dumps(report.to_json(), indent=1) + "\n")


#: GPU recordings of a release's launches, by version, to report the derivation's coverage of: package data
#: (`recordings/`), so an installed wheel finds them as a source checkout does
RECORDINGS = {"0.26.0": importlib.resources.files(__package__) / "recordings" / "composed-v0.26.0-sm80.json"}


def gate_release(
    repo_dir: Path | None,
    series_dir: Path,
    tag: str | None,
    stock: bool = False,
    tree: Path | None = None,
    record: bool = False,
    progress=None,
    relay: Callable[[FileTree], Any] | None = None,
) -> AmpereGateReport:
    """The gate of `--tree DIR`, or of the compose branch of `tag` in `repo_dir` (the tag itself with `stock`),
    exported to a temporary folder, in the gate's environment. The counts are checked against the record of `tag`
    (composed or stock; for `--tree`, only when `tag` names what the folder is), or, with `record`, written as
    that record. Raises `ComposeError` (exit 3) for a missing tag, branch or folder.

    `relay(tree)`, when given, reads the PP top-k relay of the gated tree into the report, beside the verdict it does
    not enter (the `ampere-gate` command passes `pp.topk_relay.topk_crossing`: a reader of the room above this one,
    which this one does not import)."""
    import tempfile

    from ..errors import ComposeError
    from ..trees import DirTree
    from . import coverage_record

    release = (tag, "stock" if stock else "composed") if tag else None
    if record and release is None:
        raise ComposeError(
            "--record-coverage needs --onto TAG (the release the counts are of)", hint="e.g. --onto v0.33.0"
        )
    if tree is not None:
        if not (Path(tree) / "vllm").is_dir():
            raise ComposeError(f"--tree {tree} holds no vllm/ folder", hint="pass the folder that holds vllm/")
        report = gate_in_environment(Path(tree), label=str(tree), release=release, progress=progress)
        if relay is not None:
            report.topk_relay = relay(DirTree(Path(tree)))
        version = tree_version(Path(tree))
    else:
        if not tag:
            raise ComposeError("--onto TAG (or --tree DIR) is required", hint="e.g. --onto v0.30.0")
        from ..composed_branch import open_branch
        from ..series import version_of_tag

        version = str(version_of_tag(tag))
        if stock:
            rev, label = f"refs/tags/{tag}", f"stock {tag}"
        else:
            branch = open_branch(repo_dir, series_dir, tag)
            rev, label = f"refs/heads/{branch.branch}", branch.branch
        with tempfile.TemporaryDirectory(prefix="vllm-compose-ampere-gate-") as tmp:
            exported = export_revision(repo_dir, rev, Path(tmp))
            report = gate_in_environment(exported, label=label, release=release, progress=progress)
            if relay is not None:
                report.topk_relay = relay(DirTree(exported))
    if record:
        tools = report.coverage_check.tools
        updated = coverage_record.with_counts(coverage_record.load_record(), report, *release, tools)
        coverage_record.write_record(updated)
        report.coverage_check = coverage_record.check(report, *release, tools, updated)
    recording = RECORDINGS.get(version or "")
    if recording is not None and recording.is_file():
        report.coverage = recorded_coverage(report, recording)
    return report
