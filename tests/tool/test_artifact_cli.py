"""The `wheel` and `editable` commands on a toy compose branch: gate, label, exit codes, faults leave no file."""

from __future__ import annotations

import errno
import hashlib
import zipfile
from pathlib import Path

import pytest
import toy_vllm as toy
from toy_wheel import STOCK_NAME, gate_report, make_stock_wheel

from vllm_compose.artifacts import wheel as wheel_mod
from vllm_compose.cli import main


def compose_toy(series: Path, repo: Path, tmp_path: Path, *extra: str) -> int:
    """`vllm-compose rebase` of the toy series onto the toy release, offline from the test's sources folder."""
    argv = ["rebase", "--onto", toy.TAG, "--series", str(series), "--repo", str(repo)]
    return main([*argv, "--sources", str(tmp_path / "sources"), "--offline", "-q", *extra])


@pytest.fixture
def composed(tmp_path) -> dict[str, Path]:
    """A toy release repo with its compose branch written by `vllm-compose rebase`, and a stock wheel."""
    series = toy.write_series(tmp_path / "series", tmp_path / "sources")
    repo = toy.make_release_repo(tmp_path / "vllm")
    rc = compose_toy(series, repo, tmp_path)
    assert rc == 0
    stock = make_stock_wheel(tmp_path / "stock")
    return {"series": series, "repo": repo, "stock": stock, "out": tmp_path / "dist"}


def wheel_argv(c: dict[str, Path], *extra: str) -> list[str]:
    return [
        "wheel",
        "--onto",
        toy.TAG,
        "--repo",
        str(c["repo"]),
        "--series",
        str(c["series"]),
        "--stock-wheel",
        str(c["stock"]),
        "--out",
        str(c["out"]),
        "--no-ampere-gate",  # a toy tree has no DSA path; the gate's wiring has its own tests below
        *extra,
    ]


def test_wheel_from_compose_branch(composed, capsys) -> None:
    assert main(wheel_argv(composed, "--verify", "--json", str(composed["out"] / "w.json"))) == 0
    wheels = list(composed["out"].glob("*.whl"))
    assert len(wheels) == 1
    name = wheels[0].name
    assert name.startswith("vllm-0.26.0+compose.101.g") and name.endswith("-cp38-abi3-manylinux_2_28_x86_64.whl")
    with zipfile.ZipFile(wheels[0]) as zf:
        runner = zf.read("vllm/runner.py").decode()
    assert "intermediate_tensors=None" in runner and "name.strip()" in runner
    out = capsys.readouterr().out
    assert "verified" in out and "compile pass" in out


def test_label_is_stable_and_changes_with_the_series(composed, tmp_path) -> None:
    from vllm_compose.composed_branch import open_branch

    first = open_branch(composed["repo"], composed["series"], toy.TAG).label
    assert first == open_branch(composed["repo"], composed["series"], toy.TAG).label
    other = tmp_path / "other"
    toy.write_series(other / "series", other / "sources", fix_body=toy.FIX_BODY.replace("name.strip()", "name.lower()"))
    repo2 = toy.make_release_repo(other / "vllm")
    assert (
        main(
            [
                "rebase",
                "--onto",
                toy.TAG,
                "--series",
                str(other / "series"),
                "--repo",
                str(repo2),
                "--sources",
                str(other / "sources"),
                "--offline",
                "-q",
            ]
        )
        == 0
    )
    second = open_branch(repo2, other / "series", toy.TAG).label
    assert first.split(".g")[0] == second.split(".g")[0] == "compose.101"
    assert first != second


def test_wheel_refuses_a_branch_with_a_hand_commit(composed, capsys) -> None:
    repo = composed["repo"]
    branch = "compose-101-v0.26.0"
    toy.git(repo, "checkout", "-q", branch)
    (repo / "vllm" / "runner.py").write_text(toy.RUNNER + "\nVALUE = undefined_helper()\n")
    toy.git(repo, "commit", "-qam", "hand edit")
    toy.git(repo, "checkout", "-q", "--detach")
    assert main(wheel_argv(composed)) == 2
    assert "did not write" in capsys.readouterr().err
    assert not composed["out"].exists() or not list(composed["out"].iterdir())


def test_wheel_refuses_failing_checks(tmp_path, capsys) -> None:
    # the compose accepted the failure (recorded in its report); the wheel must still refuse the tree
    series = toy.write_series(tmp_path / "series", tmp_path / "sources", fix_body=toy.BAD_FIX_BODY)
    repo = toy.make_release_repo(tmp_path / "vllm")
    assert compose_toy(series, repo, tmp_path, "--accept-check-failures") == 0
    out = tmp_path / "dist"
    rc = main(
        [
            "wheel",
            "--onto",
            toy.TAG,
            "--repo",
            str(repo),
            "--series",
            str(series),
            "--stock-wheel",
            str(make_stock_wheel(tmp_path / "stock")),
            "--out",
            str(out),
            "--no-ampere-gate",
        ]
    )
    assert rc == 2
    assert "normalise" in capsys.readouterr().err
    assert not out.exists()


def test_wheel_without_compose_branch_is_bad_input(tmp_path, capsys) -> None:
    series = toy.write_series(tmp_path / "series", tmp_path / "sources")
    repo = toy.make_release_repo(tmp_path / "vllm")
    assert main(["wheel", "--onto", toy.TAG, "--repo", str(repo), "--series", str(series)]) == 3
    err = capsys.readouterr().err
    assert "compose-101-v0.26.0 is not in" in err and "hint: compose first" in err


def _no_wheel_left(out: Path) -> None:
    assert not out.exists() or [p.name for p in out.iterdir()] == []


def test_corrupt_stock_wheel_exit_3(composed, capsys) -> None:
    data = composed["stock"].read_bytes()
    composed["stock"].write_bytes(data[: len(data) // 2])  # truncated download
    assert main(wheel_argv(composed)) == 3
    assert "corrupt or truncated" in capsys.readouterr().err
    _no_wheel_left(composed["out"])


def test_tampered_stock_wheel_exit_3(composed, tmp_path, capsys) -> None:
    stock = make_stock_wheel(tmp_path / "tampered", tamper={"vllm/_C.abi3.so": b"swapped"})
    assert main(wheel_argv({**composed, "stock": stock})) == 3
    assert "RECORD hash mismatch" in capsys.readouterr().err
    _no_wheel_left(composed["out"])


def test_disk_full_exit_3(composed, monkeypatch, capsys) -> None:
    real = wheel_mod._open_temp_output

    def full(out_dir, name):
        path, fh = real(out_dir, name)

        class Full:
            def __getattr__(self, attr):
                return getattr(fh, attr)

            def write(self, data):
                raise OSError(errno.ENOSPC, "No space left on device")

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fh.close()

        return path, Full()

    monkeypatch.setattr(wheel_mod, "_open_temp_output", full)
    assert main(wheel_argv(composed)) == 3
    assert "No space left on device" in capsys.readouterr().err
    _no_wheel_left(composed["out"])


def test_hash_mismatch_from_index_exit_3(composed, tmp_path, fake_http, capsys) -> None:
    import json

    stock = composed["stock"]
    index = {
        "files": [
            {"filename": STOCK_NAME, "url": "https://index.invalid/files/" + STOCK_NAME, "hashes": {"sha256": "0" * 64}}
        ]
    }
    fake_http.serve(
        "https://index.invalid/simple/vllm/", json.dumps(index).encode(), "application/vnd.pypi.simple.v1+json"
    )
    fake_http.serve("https://index.invalid/files/" + STOCK_NAME, stock.read_bytes())
    cache = tmp_path / "wheels"
    argv = [a for a in wheel_argv(composed) if a not in ("--stock-wheel", str(stock))]
    assert main(argv + ["--wheel-cache", str(cache), "--index-url", "https://index.invalid/simple/"]) == 3
    assert "sha256 mismatch" in capsys.readouterr().err
    assert not list(cache.rglob("*.whl")) and not [p for p in (cache / "sha256").iterdir()]
    _no_wheel_left(composed["out"])


def test_wheel_fetches_the_stock_wheel_then_works_offline(composed, tmp_path, fake_http, capsys) -> None:
    stock = composed["stock"]
    digest = hashlib.sha256(stock.read_bytes()).hexdigest()
    index = f'<a href="/files/{STOCK_NAME}#sha256={digest}">{STOCK_NAME}</a>'
    fake_http.serve("https://index.invalid/simple/vllm/", index.encode(), "text/html")
    fake_http.serve("https://index.invalid/files/" + STOCK_NAME, stock.read_bytes())
    cache = tmp_path / "cache"
    argv = [a for a in wheel_argv(composed) if a not in ("--stock-wheel", str(stock))] + ["--wheel-cache", str(cache)]
    assert main(argv + ["--index-url", "https://index.invalid/simple/"]) == 0
    assert (cache / "wheels" / STOCK_NAME).read_bytes() == stock.read_bytes()
    fake_http.routes.clear()
    assert main(argv + ["--offline"]) == 0
    assert len(fake_http.requests) == 2 and len(list(composed["out"].glob("*.whl"))) == 1
    assert STOCK_NAME in capsys.readouterr().out


def test_editable_prints_the_precompiled_command(composed, capsys) -> None:
    repo = composed["repo"]
    base = [
        "editable",
        "--onto",
        toy.TAG,
        "--repo",
        str(repo),
        "--series",
        str(composed["series"]),
        "--stock-wheel",
        str(composed["stock"]),
        "--no-ampere-gate",
    ]
    assert main(base) == 0  # the compose checked its branch out
    capsys.readouterr()
    toy.git(repo, "checkout", "-q", "--detach", toy.TAG)
    assert main(base) == 3  # the release is checked out, not the compose
    assert f"git -C {repo} checkout compose-101-v0.26.0" in capsys.readouterr().err
    toy.git(repo, "checkout", "-q", "compose-101-v0.26.0")
    assert main(base) == 0
    line = capsys.readouterr().out
    assert "VLLM_USE_PRECOMPILED=1" in line and f"VLLM_PRECOMPILED_WHEEL_LOCATION={composed['stock']}" in line
    assert "VLLM_VERSION_OVERRIDE=0.26.0+compose.101.g" in line and "pip install --editable" in line


# --- the Ampere gate before every artifact -------------------------------------------------------------------------
# The toy tree has no DSA path, so these replace the gate's derivation with a report; the real derivation is tested
# in test_kernel_launches.py. What is tested here is that an artifact is refused, and nothing written, unless the gate
# passed or was explicitly skipped.


@pytest.fixture
def gate_says(monkeypatch):
    from vllm_compose.ampere import gate as ampere_gate
    from vllm_compose.ampere.gate_env import GateEnvironmentError

    def set_result(ok: bool | None, unavailable: str | None = None) -> None:
        def gate(tree, label="", release=None, **kw):
            if unavailable is not None:
                what = f"the Ampere gate's environment could not be created: {unavailable}"
                raise GateEnvironmentError(what, hint="check that pip reaches your package index, or --no-ampere-gate")
            assert release == ("v0.26.0", "composed")  # the artifact names the release its record is of
            return gate_report(bool(ok))

        monkeypatch.setattr(ampere_gate, "gate_in_environment", gate)

    return set_result


def _gated_wheel_argv(composed) -> list[str]:
    return [a for a in wheel_argv(composed) if a != "--no-ampere-gate"]


def test_wheel_refuses_a_compose_that_fails_the_ampere_gate(composed, gate_says, capsys) -> None:
    gate_says(False)
    assert main(_gated_wheel_argv(composed)) == 2
    err = capsys.readouterr().err
    assert "fails the Ampere gate: _fused_q_kernel (sm_80): fp8e4nv not supported" in err and "hint:" in err
    assert not composed["out"].exists() or not list(composed["out"].iterdir())


def test_wheel_refuses_where_the_gate_cannot_run_and_says_how_to_proceed(composed, gate_says, capsys) -> None:
    # the machine's problem (no index for the gate's torch), not the series': exit 3, not 2
    gate_says(True, unavailable="pip install torch==2.13.0 triton==3.6.0 failed: no matching distribution")
    assert main(_gated_wheel_argv(composed)) == 3
    err = capsys.readouterr().err
    assert "environment could not be created: pip install torch==2.13.0 triton==3.6.0 failed" in err
    assert "package index" in err and "--no-ampere-gate" in err
    assert not composed["out"].exists() or not list(composed["out"].iterdir())


def test_wheel_records_the_gate_that_passed_or_that_it_was_skipped(composed, gate_says, capsys, tmp_path) -> None:
    import json

    gate_says(True)
    assert main([*_gated_wheel_argv(composed), "--json", str(tmp_path / "a.json")]) == 0
    assert "ampere gate: pass (1 kernel x target compiled; 2 specializations for sm_80)" in capsys.readouterr().out
    assert json.loads((tmp_path / "a.json").read_text())["ampere_gate"]["ok"] is True
    assert main(wheel_argv(composed, "--json", str(tmp_path / "b.json"))) == 0
    assert "ampere gate: SKIPPED (--no-ampere-gate" in capsys.readouterr().out
    assert json.loads((tmp_path / "b.json").read_text())["ampere_gate"] == {"skipped": "--no-ampere-gate"}


def test_editable_refuses_a_compose_that_fails_the_ampere_gate(composed, gate_says, capsys) -> None:
    repo = composed["repo"]
    toy.git(repo, "checkout", "-q", "--detach", "compose-101-v0.26.0")
    argv = ["editable", "--onto", toy.TAG, "--repo", str(repo), "--series", str(composed["series"])]
    gate_says(False)
    assert main([*argv, "--stock-wheel", str(composed["stock"])]) == 2
    assert "fails the Ampere gate" in capsys.readouterr().err
    gate_says(True)
    assert main([*argv, "--stock-wheel", str(composed["stock"])]) == 0
    assert "ampere gate: pass" in capsys.readouterr().out
