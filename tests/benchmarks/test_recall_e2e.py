"""benchmarks/recall_e2e.py without a GPU: the decode-rate arithmetic and the table it writes into the docs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from recall_e2e import decode_rates, main, table  # noqa: E402


def test_decode_rate_is_the_difference_of_the_two_generations():
    # 8 requests, 128 tokens: 127 decode steps took 12.7 s - 0.7 s
    assert decode_rates(8, 128, 0.7, 12.7) == {"per_request_tok_s": 10.58, "aggregate_tok_s": 84.67}


@pytest.mark.parametrize("tokens, t_one, t_all", [(1, 0.5, 2.0), (128, 3.0, 3.0), (128, 3.0, 2.0)])
def test_a_rate_that_cannot_be_derived_is_refused(tokens, t_one, t_all):
    with pytest.raises(ValueError, match="cannot derive a decode rate"):
        decode_rates(4, tokens, t_one, t_all)


def _result(**kw):
    base = {
        "mode": "eager",
        "mtp": 0,
        "acceptance": 1.0,
        "first_draft_accepted": None,
        "batch": 1,
        "context": 8192,
        "per_request_tok_s": 30.1,
        "aggregate_tok_s": 30.1,
        "as_predicted": True,
    }
    return {**base, **kw}


def test_table_orders_rows_and_marks_wrong_tokens():
    rows = table(
        [
            _result(mtp=1, acceptance=0.8, first_draft_accepted=0.79, per_request_tok_s=41.0, aggregate_tok_s=41.0),
            _result(),
            _result(batch=8, as_predicted=False, aggregate_tok_s=200.0),
        ]
    ).splitlines()
    assert rows[2] == "| offline | eager | 0 | 1.00 | - | 1 | 8,192 | 30.1 | 30.1 | - | - | - | yes |"
    assert rows[3] == "| offline | eager | 1 | 0.80 | 0.79 | 1 | 8,192 | 41.0 | 41.0 | - | - | - | yes |"
    assert rows[4].endswith("| 200.0 | - | - | - | NO |")


def test_table_command_reads_result_files(tmp_path, capsys):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(_result()))
    assert main(["table", str(f)]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith("| offline | eager | 0 |")


def test_table_reads_a_serve_file_of_rows_beside_an_offline_one(tmp_path, capsys):
    one, rows = tmp_path / "r.json", tmp_path / "s.json"
    one.write_text(json.dumps(_result(path="offline")))
    rows.write_text(json.dumps([_result(path="serve-stream"), _result(path="serve", batch=8)]))
    assert main(["table", str(one), str(rows)]) == 0
    got = [r.split(" | ")[0] for r in capsys.readouterr().out.splitlines()[2:]]
    assert got == ["| offline", "| serve-stream", "| serve"]
