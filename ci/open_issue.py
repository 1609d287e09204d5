#!/usr/bin/env python3
"""Open, or update, the GitHub issue titled TITLE with the body in FILE (REST API, $GITHUB_TOKEN).

An open issue with the same title is updated (one issue per release, not one per run). `--dry-run` prints the
requests instead of sending them (tests; no token needed). A body file that cannot be read, a missing token or an
API that cannot be reached or refuses is an error (exit code 3) that says what to check; nothing is sent after it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from vllm_compose.errors import ComposeError

API = "https://api.github.com"


def requests_for(repo: str, title: str, body: str, existing: int | None) -> list[dict]:
    """The REST calls to make: PATCH the existing issue, or POST a new one."""
    if existing is not None:
        return [{"method": "PATCH", "url": f"{API}/repos/{repo}/issues/{existing}", "json": {"body": body}}]
    return [
        {
            "method": "POST",
            "url": f"{API}/repos/{repo}/issues",
            "json": {"title": title, "body": body, "labels": ["compose"]},
        }
    ]


def _call(method: str, url: str, token: str, payload: dict | None = None):
    """The API's JSON answer to one request. Raises `ComposeError` when the API cannot be reached or refuses."""
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as response:  # noqa: S310 (api.github.com)
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise ComposeError(
            f"the GitHub API answered {exc.code} {exc.reason} to {method} {url}",
            hint="check that $GITHUB_TOKEN may write issues (the workflow's `permissions: issues: write`) and that "
            "--repo names the repository",
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ComposeError(
            f"cannot reach the GitHub API for {method} {url}: {reason}",
            hint="retry when the network is back; --dry-run prints the requests without sending them",
        ) from None


def open_or_update(repo: str, title: str, body: str, existing: int | None, token: str, dry_run: bool) -> list[str]:
    """Send (or, with `dry_run`, only render) the requests that open or update the issue; the lines to print: the
    requests as JSON, or the issue's address. Raises `ComposeError` as `_call` does."""
    if existing is None and not dry_run:
        if not token:
            raise ComposeError("$GITHUB_TOKEN is not set", hint="run it from the workflow, or pass --dry-run")
        query = urllib.parse.urlencode({"state": "open", "labels": "compose", "per_page": 100})
        for issue in _call("GET", f"{API}/repos/{repo}/issues?{query}", token):
            if issue.get("title") == title:
                existing = issue["number"]
    out = []
    for req in requests_for(repo, title, body, existing):
        if dry_run:
            out.append(json.dumps(req, indent=2))
        else:
            out.append(_call(req["method"], req["url"], token, req["json"]).get("html_url", ""))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY"), help="owner/name")
    p.add_argument("--title", required=True)
    p.add_argument("--body-file", required=True, type=Path)
    p.add_argument("--existing", type=int, help="issue number to update (default: search open issues)")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    try:
        if not args.repo:
            raise ComposeError(
                "no repository to open the issue in", hint="pass --repo owner/name (or set $GITHUB_REPOSITORY)"
            )
        try:
            body = args.body_file.read_text()
        except OSError as exc:
            raise ComposeError(
                f"cannot read the issue body: {exc.strerror}",
                file=str(args.body_file),
                hint="ci/compose_release.py writes it as issue-<TAG>.md in its --out folder",
            ) from None
        token = os.environ.get("GITHUB_TOKEN", "")
        lines = open_or_update(args.repo, args.title, body, args.existing, token, args.dry_run)
    except ComposeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
