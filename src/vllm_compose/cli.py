"""Command line: argument parsing and dispatch only.

`vllm-compose rebase|apply|check-fuzz|validate ...`; `scripts/rebase_series.py`, `scripts/apply_series.py` and
`scripts/check_fuzz.py` are shims that call `main()` with their subcommand. Every `ComposeError` is caught here
once, printed as "error: <what, where>\\n  hint: <how to proceed>" and mapped to its exit code (README: exit codes).
Each command's handler is in `commands`; options several commands take are declared once (`SHARED_OPTIONS`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import commands
from .errors import ComposeError, ExitCode

#: what `vllm-compose --help` says the tool is
DESCRIPTION = (
    "Compose upstream vLLM PRs (#46994 MTP under pipeline parallelism, #38476 TRITON_MLA_SPARSE) and the series' "
    "skew fixes onto a vLLM release as the git branch compose-<PRs>-<tag> of vllm/, placing every hunk where it "
    "belongs and proving it (audit, checks); then build a wheel, an editable install or an image overlay from it."
)
EPILOG = (
    "exit codes: 0 done; 1 stopped on a conflict (resume with --continue) / hunks not placed / audit found bad "
    "hunks; 2 refused by the audit or the checks (nothing written); 3 bad input, configuration or network (the "
    "message says what and how to proceed); 4 bad command line (usage: an unknown or missing option, or options "
    "that do not go together). README.md has the details."
)

#: where things are when the user names nothing (relative to the current directory)
DEFAULTS = {
    "series": "series",  # the series folder of this repository
    "repo": "vllm",  # the vLLM submodule
}


class UsageError(Exception):
    """A command line argparse cannot make sense of; `main` prints it with the usage and returns `ExitCode.USAGE`."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised (exit code 4, not argparse's 2: the README gives 2 to "refused")."""

    def error(self, message: str):
        raise UsageError(self, message)


def _tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm-compose")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed: pip install -e .)"


#: options several commands share, each declared once: its flags and `add_argument` keywords. A command takes them
#: through `_shared` (argparse `parents=`), and may say what one means for it with its own help text.
SHARED_OPTIONS = {
    "series": (("--series",), {"default": DEFAULTS["series"], "type": Path, "help": "series folder (default: series)"}),
    "repo": (("--repo",), {"default": DEFAULTS["repo"], "type": Path, "help": "vLLM git repository (default: vllm)"}),
    "init": (
        ("--init",),
        {"action": "store_true", "help": "create the --repo folder and a repository in it if missing"},
    ),
    "json": (("--json",), {"type": Path, "metavar": "FILE", "help": "also write the report as JSON"}),
    "sources": (("--sources",), {"type": Path, "metavar": "DIR", "help": "seed the cache with the files in DIR"}),
    "cache": (
        ("--cache",),
        {"type": Path, "metavar": "DIR", "help": "cache folder (default: $VLLM_COMPOSE_CACHE or XDG)"},
    ),
    "offline": (("--offline",), {"action": "store_true", "help": "use only the cache and --sources"}),
    "quiet": (("--quiet", "-q"), {"action": "store_true", "help": "no progress display"}),
    "no_import_smoke": (
        ("--no-import-smoke",),
        {
            "action": "store_true",
            "help": "skip importing the changed modules (recorded in the report; without it the import smoke runs "
            "only where the installed vLLM is the release composed, its kernels load and a CUDA driver is present, "
            "and is skipped with the reason elsewhere)",
        },
    ),
    "no_ampere_gate": (
        ("--no-ampere-gate",),
        {
            "action": "store_true",
            "help": "build without the Ampere gate (the DSA kernels compiled for sm_80/86); recorded in the report",
        },
    ),
    "allow_unreviewed": (
        ("--allow-unreviewed",),
        {
            "action": "store_true",
            "help": "build although relocated or merged landings have no approval for the release (recorded)",
        },
    ),
}
#: what `--offline` means for the commands that compose into a repository
OFFLINE_REPO = "use only the repository, the cache and --sources"


def _shared(*names: str, **helps: str) -> argparse.ArgumentParser:
    """A parent parser holding the shared options `names` (keys of `SHARED_OPTIONS`), in that order; `helps`
    replaces an option's help text for this command. Built afresh per command: argparse shares a parent's actions
    with every child, so a help text changed for one command would change for all."""
    parent = argparse.ArgumentParser(add_help=False)
    for name in names:
        flags, kwargs = SHARED_OPTIONS[name]
        parent.add_argument(*flags, **{**kwargs, **({"help": helps[name]} if name in helps else {})})
    return parent


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vllm-compose", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"%(prog)s {_tool_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    _compose_parsers(sub)
    _gate_parsers(sub)
    _artifact_parsers(sub)
    _pp_plan_parser(sub)
    _prove_parser(sub)
    _pr_bump_parser(sub)
    s = sub.add_parser(
        "audit-series",
        help="compose the series onto a release in a scratch repository (pre-commit)",
        parents=[_shared("series", "sources", "cache", "offline")],
    )
    s.add_argument("--onto", action="append", metavar="TAG", help="release tag to compose onto (repeatable)")
    return p


def _compose_parsers(sub) -> None:
    """`rebase`, `apply`, `check-fuzz`, `validate`, `status`, `series-diff`, `review`: composing and proving it."""
    r = sub.add_parser(
        "rebase",
        help="replay the series onto a vLLM release tag into a compose branch",
        parents=[
            _shared(
                "series",
                "repo",
                "init",
                "json",
                "sources",
                "cache",
                "offline",
                "quiet",
                "no_import_smoke",
                sources="seed the cache with the files in DIR (offline use)",
                offline=OFFLINE_REPO,
            )
        ],
    )
    r.add_argument("--onto", metavar="TAG", help="release tag, e.g. v0.26.0 (imported from PyPI when needed)")
    r.add_argument(
        "--worktree",
        type=Path,
        metavar="DIR",
        help="where a conflict is left for a person (default: <repo>/../vllm-compose-conflict-<tag>)",
    )
    g = r.add_mutually_exclusive_group()
    g.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="record the resolution in the worktree as a new skew-fix entry and go on",
    )
    g.add_argument("--abort", action="store_true", help="drop a stopped compose (keeps a worktree you edited)")
    r.add_argument("--message", "-m", help="with --continue: the fix's commit message (subject, blank, body)")
    r.add_argument(
        "--accept-check-failures",
        action="store_true",
        help="write the branch although checks fail (recorded in the report)",
    )
    r.add_argument("--allow-dirty", action="store_true", help="go on although the repository has local changes")
    r.add_argument(
        "--allow-unreviewed",
        action="store_true",
        help="write the branch although a fix outside its written_for landed unreviewed (recorded on the branch)",
    )
    r.add_argument("--force", action="store_true", help="replace a branch whose tip was not written by this tool")
    r.add_argument("--no-checks", action="store_true", help="skip the per-entry checks (recorded in the report)")
    r.add_argument(
        "--no-checkout",
        action="store_true",
        help="leave the repository's worktree as it is (default: check the new branch out when it is clean or empty)",
    )

    a = sub.add_parser(
        "apply",
        help="apply a series or patches onto a plain directory (e.g. site-packages)",
        parents=[_shared("json", "sources", "cache", "offline")],
    )
    a.add_argument("--to", required=True, type=Path, metavar="DIR")
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--series", type=Path, metavar="DIR")
    src.add_argument("--patch", type=Path, action="append", metavar="FILE")
    a.add_argument("--onto", metavar="TAG", help="with --series: the release the entries are chosen for")
    a.add_argument("-p", dest="strip", type=int, default=1, help="strip level (default 1)")
    a.add_argument("--dry-run", action="store_true")
    a.add_argument(
        "--markers",
        action="store_true",
        help="write diff3-style markers at the site found for a conflicting hunk instead of a .rej file (a hunk with no site found still goes to .rej)",
    )

    c = sub.add_parser("check-fuzz", help="audit where every hunk of an application landed", parents=[_shared("json")])
    c.add_argument("--stock", required=True, help="stock tree: a directory, or a git revision with --repo")
    c.add_argument("--patched", required=True, help="patched tree: a directory, or a git revision with --repo")
    c.add_argument("--repo", type=Path, help="git repository for revisions")
    c.add_argument("-p", dest="strip", type=int, default=1)
    c.add_argument("patches", nargs="+", type=Path, metavar="PATCH")

    sub.add_parser(
        "validate",
        help="validate a series folder (series.toml and its patches)",
        parents=[_shared("series", "cache", cache="cache folder the PR diffs are looked up in")],
    )

    st = sub.add_parser(
        "status",
        help="compose onto each tag (no branch state kept on conflict) and write the status table",
        parents=[
            _shared("series", "repo", "init", "sources", "cache", "offline", "no_import_smoke", offline=OFFLINE_REPO)
        ],
    )
    st.add_argument("--onto", action="append", required=True, metavar="TAG", help="repeat for each release")
    st.add_argument("--write", type=Path, metavar="FILE", help="put the table into FILE's marked section")
    st.add_argument("--json-dir", type=Path, metavar="DIR", help="also write each tag's report as DIR/TAG.json")
    st.add_argument(
        "--gpu-results",
        type=Path,
        default=Path("lab/results"),
        metavar="DIR",
        help="device result files for the GPU column (default: lab/results)",
    )
    st.add_argument("--no-ampere-gate", action="store_true", help="leave the Ampere gate column unfilled")

    sd = sub.add_parser(
        "series-diff",
        help="per-entry diff of the compose branches of two tags",
        parents=[_shared("series", "repo", "json")],
    )
    sd.add_argument("old", metavar="OLD_TAG")
    sd.add_argument("new", metavar="NEW_TAG")
    sd.add_argument("--no-interdiff", action="store_true")

    rv = sub.add_parser(
        "review",
        help="compose without publishing; list the relocated and merged landings, record approvals of them",
        parents=[
            _shared(
                "series",
                "repo",
                "json",
                "sources",
                "cache",
                "offline",
                "quiet",
                series="series folder (approvals: reviews.toml)",
                json="also write the review as JSON",
                offline="use only the cache and --sources for the PR diffs",
            )
        ],
    )
    rv.add_argument("--onto", required=True, metavar="TAG", help="release tag whose compose branch to review")
    ga = rv.add_mutually_exclusive_group()
    ga.add_argument("--approve", action="append", metavar="ID", help="approve this landing (<entry>:<path>#<hunk>)")
    ga.add_argument("--approve-all", action="store_true", help="approve every unreviewed landing listed")
    rv.add_argument("--by", help="with --approve: who read the landings")
    rv.add_argument("--why", help="with --approve: why they are right")


def _gate_parsers(sub) -> None:
    """`ampere-path`, `ampere-gate`, `semantic-check`, `kernel-gate`: what a compose branch does on Ampere and to
    the types."""
    ap = sub.add_parser(
        "ampere-path",
        help="the DSA path of each release on CUDA and its sm_89+ kernels",
        parents=[_shared("series", "repo", "json", json="also write every release's path as JSON")],
    )
    ap.add_argument("--onto", nargs="+", action="extend", required=True, metavar="TAG", help="one or more releases")
    ap.add_argument("--write", type=Path, metavar="FILE", help="put the tables into FILE's marked section")

    ag = sub.add_parser(
        "ampere-gate",
        help="derive a release's DSA-path Triton launches and compile them for sm_80/86",
        parents=[
            _shared(
                "series",
                "repo",
                "json",
                series="series folder (names the branch)",
                json="also write the per-kernel results as JSON",
            )
        ],
    )
    ag.add_argument("--onto", metavar="TAG", help="release tag: gate its compose branch (or, with --stock, the tag)")
    ag.add_argument("--stock", action="store_true", help="gate the release tag itself, not its compose branch")
    ag.add_argument(
        "--tree",
        type=Path,
        metavar="DIR",
        help="gate a plain folder holding vllm/ instead (with --onto TAG [--stock]: checked against TAG's record)",
    )
    ag.add_argument(
        "--record-coverage",
        action="store_true",
        help="write this run's launch counts as the release's coverage record (after review; see docs/ampere-path.md)",
    )

    sc = sub.add_parser(
        "semantic-check",
        help="type-check a compose branch against its release (ty) and name each new finding's entry",
        parents=[
            _shared(
                "series",
                "repo",
                "json",
                series="series folder (baseline and branch)",
                json="also write the findings of every release as JSON",
            )
        ],
    )
    sc.add_argument("--onto", required=True, nargs="+", action="extend", metavar="TAG", help="one or more releases")
    sc.add_argument("--python", type=Path, metavar="ENV", help="environment whose packages ty resolves (default: this)")

    kg = sub.add_parser(
        "kernel-gate",
        help="compile recorded Triton kernels (lab/recordings/) of a tree for sm_80/86",
        parents=[_shared("json", json="also write the per-kernel results as JSON")],
    )
    kg.add_argument("records", type=Path, help="a lab/recordings/*.json file of recorded launches")
    kg.add_argument("tree", type=Path, help="the folder that holds the vllm/ package of the tree to gate")


def _artifact_parsers(sub) -> None:
    """`wheel`, `editable`, `image-overlay`: artifacts built from a compose (docs/install.md)."""
    branch = ("series", "repo", "no_import_smoke", "no_ampere_gate", "allow_unreviewed")

    def stock_args(x) -> None:
        x.add_argument(
            "--stock-wheel",
            type=Path,
            metavar="FILE",
            help="the stock vLLM wheel of the release (default: fetched from the index into the wheel cache)",
        )
        x.add_argument(
            "--wheel-cache",
            type=Path,
            metavar="DIR",
            help="cache folder for the stock wheel, which "
            "appears as DIR/wheels/<name> (default: $VLLM_COMPOSE_CACHE or XDG)",
        )
        x.add_argument("--index-url", help="package index for the stock wheel (default: the one pip uses)")
        x.add_argument("--offline", action="store_true", help="use only the stock wheel already in the cache")

    def branch_args(x) -> None:
        x.add_argument("--onto", required=True, metavar="TAG", help="release tag whose compose branch to build from")
        x.add_argument("--branch", help="compose branch (default: the series' compose-<PRs>-<TAG>)")
        stock_args(x)

    w = sub.add_parser(
        "wheel",
        help="build the overlay wheel of a compose branch (no compiling)",
        parents=[_shared(*branch, "json", json="also write what was built as JSON")],
    )
    branch_args(w)
    w.add_argument("--out", default=Path("dist"), type=Path, metavar="DIR", help="output folder (default: dist)")
    w.add_argument("--label", help="PEP 440 local label (default: compose.<PRs>.g<tree>)")
    w.add_argument("--verify", action="store_true", help="re-check every RECORD hash of the written wheel")

    e = sub.add_parser(
        "editable",
        help="pip install -e the composed tree over the precompiled stock wheel",
        parents=[_shared(*branch)],
    )
    branch_args(e)
    e.add_argument("--run", action="store_true", help="run the install (default: print the command)")
    e.add_argument("--python", help="interpreter whose pip installs (default: this one)")
    e.add_argument("--no-build-isolation", action="store_true", help="build with the installed torch")

    i = sub.add_parser(
        "image-overlay",
        help="compose the series onto an installed vLLM (site-packages) in place",
        parents=[_shared("series", "sources", "cache", "offline", *branch[2:], "json")],
    )
    i.add_argument("--site-packages", required=True, type=Path, metavar="DIR", help="folder holding vllm/")
    i.add_argument("--onto", metavar="TAG", help="release tag (default: v + the installed vLLM version)")
    i.add_argument("--dry-run", action="store_true", help="compose and check, write nothing into site-packages")


def _prove_parser(sub) -> None:
    """`prove`: the recall model's proof suites on the installed vLLM (a GPU machine)."""
    pr = sub.add_parser(
        "prove",
        help="prove on this GPU that the installed vLLM's sparse attention reads the right tokens (recall model)",
        description="Write the GLM-5-shaped recall model into --model-dir (unless it is there), then run each suite "
        "in a fresh interpreter: its tokens must be the predicted ones, and in eager suites every injected fault "
        "(top-k shifted, another request's, the previous step's, an unfilled shared buffer, a zeroed output) must "
        "change them. Run it in the environment vLLM is installed in.",
    )
    pr.add_argument("--model-dir", type=Path, metavar="DIR", help="the recall checkpoint's folder (required to run)")
    pr.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help="a suite to run (repeatable; default: eager, mtp1, mtp2, graph, graph_mtp1, graph_mtp2); --list names them",
    )
    pr.add_argument("--list", action="store_true", help="list the suites and exit")
    pr.add_argument("--shape", choices=("glm5", "tiny"), default="glm5", help="the model written (default glm5)")
    pr.add_argument(
        "--moe-quant",
        choices=("none", "w4a16"),
        default="none",
        help="routed experts as written: bf16 (default) or compressed-tensors int4 (Marlin on sm_80)",
    )
    pr.add_argument("--out", type=Path, default=Path("prove-results"), metavar="DIR", help="default prove-results/")
    pr.add_argument("--timeout", type=float, metavar="S", help="seconds per suite (default: none)")


def _pp_plan_parser(sub) -> None:
    """`pp-plan`: a pipeline-parallel layer partition for a DSA model (docs/pp-plan.md)."""
    pl = sub.add_parser(
        "pp-plan",
        help="a VLLM_PP_LAYER_PARTITION for a DSA model: stages start on full (top-k) layers, bytes and KV per stage",
        description="Plan a pipeline-parallel layer partition for GLM-5.x / DeepSeek-V3.2 from config.json: each "
        "stage's weight bytes and the KV tokens it leaves, stages starting on layers that compute their own top-k "
        "where that costs at most --tolerance of the KV tokens, the last stage lighter by the MTP layer and heads.",
        parents=[_shared("json", json="also write the plan as JSON ('-': print only JSON)")],
    )
    pl.add_argument("config", type=Path, help="the model's config.json (or its folder)")
    pl.add_argument("--pp", type=int, required=True, help="pipeline-parallel size")
    pl.add_argument(
        "--gpu-memory",
        type=float,
        required=True,
        metavar="GIB",
        help="each GPU's total memory in GiB as it reports it (nvidia-smi MiB / 1024: 79.2 for an A100 80GB)",
    )
    pl.add_argument("--mtp", type=int, default=0, metavar="K", help="num_speculative_tokens (default 0: no MTP)")
    pl.add_argument("--bits", type=int, default=16, help="bits per weight of the quantized matrices (default 16)")
    pl.add_argument("--mtp-bits", type=int, metavar="BITS", help="the MTP layer's bits (default: --bits)")
    pl.add_argument("--group-size", type=int, default=128, help="quantization group size (default 128)")
    pl.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F", help="default 0.9")
    pl.add_argument("--max-num-batched-tokens", type=int, default=8192, metavar="N", help="default 8192")
    pl.add_argument("--max-num-seqs", type=int, default=256, metavar="N", help="default 256")
    pl.add_argument(
        "--max-model-len", type=int, metavar="N", help="default: the config's max_position_embeddings, as vLLM"
    )
    pl.add_argument("--block-size", type=int, default=64, help="KV block size (default 64, as the indexer needs)")
    pl.add_argument(
        "--kv-cache-dtype", default="bfloat16", help="bfloat16 (default, Ampere), fp8 or fp8_ds_mla (sm_89+)"
    )
    pl.add_argument(
        "--tolerance",
        type=float,
        default=5.0,
        metavar="PCT",
        help="KV tokens a partition may give up to start more stages on full layers (default 5)",
    )


def _pr_bump_parser(sub) -> None:
    """`pr-bump`: move a PR entry to a new revision of its PR or a takeover PR (docs/pr-bump.md)."""
    b = sub.add_parser(
        "pr-bump",
        help="move a PR entry to a new revision (or a takeover PR): compose every release with it, show what changes",
        parents=[
            _shared(
                "series",
                "sources",
                "cache",
                "offline",
                "no_import_smoke",
                "json",
                no_import_smoke="skip importing the changed modules",
            )
        ],
    )
    b.add_argument("entry", metavar="ENTRY", help="the PR entry's id in series.toml, e.g. pr38476")
    b.add_argument("--to", required=True, metavar="FILE_OR_URL", help="the new revision's diff: a file or a URL")
    b.add_argument("--onto", required=True, nargs="+", action="extend", metavar="TAG", help="releases to compose")
    b.add_argument("--sha256", metavar="HEX", help="the new diff's sha256 (required for a URL; checked for a file)")
    b.add_argument("--url", help="the URL series.toml pins (default: --to when it is a URL; needed to --write a file)")
    b.add_argument("--revision", metavar="COMMIT", help="the PR head commit the diff is of (recorded)")
    b.add_argument("--origin", metavar="TEXT", help="where the bytes came from (recorded)")
    b.add_argument("--pr", type=int, metavar="N", help="a takeover PR's number (default: the entry's)")
    b.add_argument("--pr-url", help="the takeover PR's URL (default: the entry's pr_url with the number replaced)")
    b.add_argument("--paths", nargs="+", metavar="GLOB", help="keep these files of the diff (default: the entry's)")
    b.add_argument("--repo", type=Path, metavar="DIR", help="compose in DIR (objects, tags; default: a scratch one)")
    b.add_argument("--write", action="store_true", help="update series.toml when every release composes cleanly")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console command and the scripts; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        handler = {
            "rebase": commands.rebase,
            "apply": commands.apply,
            "check-fuzz": commands.check_fuzz,
            "validate": commands.validate,
            "status": commands.status,
            "series-diff": commands.series_diff,
            "ampere-path": commands.ampere_path,
            "ampere-gate": commands.ampere_gate,
            "kernel-gate": commands.kernel_gate,
            "semantic-check": commands.semantic_check,
            "review": commands.review,
            "wheel": commands.wheel,
            "editable": commands.editable,
            "image-overlay": commands.image_overlay,
            "audit-series": commands.audit_series,
            "pp-plan": commands.pp_plan,
            "pr-bump": commands.pr_bump,
            "prove": commands.prove,
        }
        return int(handler[args.command](args))
    except ComposeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted: no branch or ref was written", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
