#!/usr/bin/env python3
"""Open, or update, the GitHub issue titled TITLE with the body in FILE (REST API, $GITHUB_TOKEN).

An open issue with the same title is updated (one issue per release, not one per run). `--dry-run` prints the
requests instead of sending them (tests; no token needed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path

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
    with urllib.request.urlopen(req, timeout=60) as response:  # noqa: S310 (api.github.com)
        return json.load(response)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY"), help="owner/name")
    p.add_argument("--title", required=True)
    p.add_argument("--body-file", required=True, type=Path)
    p.add_argument("--existing", type=int, help="issue number to update (default: search open issues)")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    if not args.repo:
        print("error: --repo owner/name (or $GITHUB_REPOSITORY) is required", file=sys.stderr)
        return 3
    body = args.body_file.read_text()
    existing = args.existing
    token = os.environ.get("GITHUB_TOKEN", "")
    if existing is None and not args.dry_run:
        if not token:
            print("error: $GITHUB_TOKEN is not set", file=sys.stderr)
            return 3
        query = urllib.parse.urlencode({"state": "open", "labels": "compose", "per_page": 100})
        for issue in _call("GET", f"{API}/repos/{args.repo}/issues?{query}", token):
            if issue.get("title") == args.title:
                existing = issue["number"]
    for req in requests_for(args.repo, args.title, body, existing):
        if args.dry_run:
            print(json.dumps(req, indent=2))
        else:
            answer = _call(req["method"], req["url"], token, req["json"])
            print(answer.get("html_url", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
