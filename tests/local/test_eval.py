"""`openmemory eval`: the six measures from the store, per week and overall, --split, --experiment,
--plots; and retrieval measured (the module, the labelled set, the learned embedder)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openmemory_local.cli.main import main
from openmemory_local.core.config import Config
from openmemory_local.eval.measures import evaluate, two_agent_result
from openmemory_local.sleep.replay import replay
from openmemory_local.eval.retrieval import fuse, rank, rank_bm25, score
from openmemory_local.storage.store import Store

from .test_sleep import add, at, correction, error, session

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))


@pytest.fixture
def lived(store):
    """Three sessions of one project in a week, one the next week; replayed day by day."""
    add(store, session("s1", 0, ["git push"]), error("e1", "s1", 0), correction("c1", "s1", 0), day=0)
    add(store, session("s2", 1, ["git push"]), error("e2", "s2", 1), day=1)
    add(store, session("s3", 2, ["git push"]), error("e3", "s3", 2), correction("c2", "s3", 2), day=2)
    add(store, session("s4", 8, ["git push"]), error("e4", "s4", 8),
        error("x1", "s4", 8, command="make docs", first="make: *** No rule to make target 'docs'."), day=8)
    replay(store, at(9, 9))
    return store


def test_the_measures_from_the_store(lived):
    m = evaluate(lived, at(9, 9))["measures"]
    assert m["repeat_yourself"]["overall"] == {"corrections": 2, "repeats": 1, "rate": 0.5}  # c2 restates c1
    # e3 and e4 came after the lesson learned at the end of day 1; e1, e2 and x1 did not
    assert m["repeated_errors"]["overall"] == {"failures": 5, "described": 2, "sessions": 4, "per_session": 0.5,
                                               "share": 0.4}
    assert [(w["week"], w["failures"], w["described"], w["sessions"]) for w in m["repeated_errors"]["weeks"]] == [
        ("2026-03-02", 3, 1, 3), ("2026-03-09", 2, 1, 1)]
    predictions = lived.conn.execute("SELECT state, COUNT(*) FROM predictions GROUP BY state").fetchall()
    decided = {s: n for s, n in predictions if s in ("confirmed", "failed")}
    acc = m["prediction_accuracy"]["overall"]
    assert (acc["confirmed"], acc["failed"]) == (decided.get("confirmed", 0), decided.get("failed", 0))
    assert acc["confirmed"] >= 2 and acc["accuracy"] == round(acc["confirmed"] / acc["decided"], 4)
    assert m["surprises_per_session"]["overall"] == {"surprises": 7, "sessions": 4, "per_session": 1.75}
    hashed = m["retrieval"]["overall"]["hashed"]
    assert hashed["queries"] == 2 and hashed["recall@3"] == 1.0  # the earlier pushes are found
    assert m["two_agents"]["status"].startswith("no experiment given")


def test_split_learns_before_and_scores_after(lived):
    result = evaluate(lived, at(9, 9), split=at(1, 23))
    m = result["measures"]
    # before: the push failed in s1 and s2 (a lesson), the correction c1 (a lesson); after: s3, s4
    assert result["learned_before_split"] == 2 and result["open_at_split"] == 2
    assert m["repeated_errors"]["overall"]["failures"] == 3 and m["repeated_errors"]["overall"]["described"] == 2
    assert m["repeat_yourself"]["overall"] == {"corrections": 1, "repeats": 1, "rate": 1.0}
    assert m["prediction_accuracy"]["overall"]["confirmed"] == 2 and m["prediction_accuracy"]["overall"]["open"] == 0
    assert m["surprises_per_session"]["overall"]["sessions"] == 2
    assert m["retrieval"]["overall"]["hashed"]["recall@3"] == 1.0
    # the store itself was only read
    assert lived.conn.execute("SELECT COUNT(*) FROM lessons WHERE learned IS NOT NULL").fetchone()[0] >= 2
    assert evaluate(lived, at(9, 9))["measures"]["repeated_errors"]["overall"]["described"] == 2
    # a split after everything scores nothing, and says so
    late = evaluate(lived, at(9, 9), split=at(9, 8))
    assert late["episodes_after_split"] == 0 and late["measures"]["repeated_errors"]["overall"]["failures"] == 0


def test_eval_on_the_spotter_history_replayed_from_an_empty_store(spotter, tmp_path, capsys):
    home = str(tmp_path / "om")
    assert main(["ingest", str(spotter), "--home", home, "-q", "--now", "2026-02-13T09:00:00Z"]) == 0
    assert main(["eval", "--home", home, "--json", "--plots", str(tmp_path / "plots")]) == 0
    result = json.loads(capsys.readouterr().out)
    m = result["measures"]
    with Store.open(Config(home=tmp_path / "om")) as store:
        failures = store.conn.execute(
            "SELECT COUNT(*) FROM episodes WHERE kind = 'error' AND json_extract(fields, '$.failure') != 'cancelled'"
        ).fetchone()[0]
        pushes = store.conn.execute("SELECT session_id FROM episodes WHERE kind = 'error' AND "
                                    "json_extract(fields, '$.first_line') LIKE '%has no upstream branch%' "
                                    "ORDER BY created").fetchall()
    assert m["repeated_errors"]["overall"]["failures"] == failures and m["surprises_per_session"]["overall"][
        "sessions"] == 8
    assert len(pushes) == 3 and m["repeated_errors"]["overall"]["described"] >= 1  # the third push at least
    assert m["prediction_accuracy"]["overall"]["decided"] >= 2
    assert m["retrieval"]["overall"]["hashed"]["recall@3"] == 1.0
    assert sorted(Path(p).name for p in result["plots"]) == [
        "1-repeat-yourself-rate.png", "2-repeated-error-rate.png", "3-prediction-accuracy.png",
        "4-surprises-per-session.png", "5-two-agents.png", "6-retrieval-quality.png"]
    assert all(Path(p).read_bytes().startswith(b"\x89PNG") for p in result["plots"])
    # held out: the last session (spotter-a0y, from 15:36 on the 12th): its push was foreseen, and recalled
    assert main(["eval", "--home", home, "--split", "2026-02-12T15:30:00Z"]) == 0
    out = capsys.readouterr().out
    assert "split at 2026-02-12T15:30:00.000Z" in out and "1 sessions)" in out
    assert main(["eval", "--home", home, "--split", "yesterday"]) == 2


def test_the_two_agent_result_is_read_from_the_experiments_folder(tmp_path, capsys):
    assert "holds no summary.json" in two_agent_result(tmp_path)["status"]
    assert "is not a folder" in two_agent_result(tmp_path / "missing")["status"]
    summary = {"what": "the two-agent experiment, simulated", "arms": {"control": {
        "b_repeated_error_rate": {"first_week_b_meets_them": 0.5, "last_week": 0.4, "all": 0.45},
        "b_repeated_error_rate_by_day": [{"day": 10, "met": 2, "failed": 1, "rate": 0.5}], "ingest_check_ok": True}},
        "not_measured": {"commons arm": "needs round two"}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    read = two_agent_result(tmp_path)
    assert read["status"] == "read" and read["arms"]["control"]["b_repeated_error_rate"]["all"] == 0.45
    assert main(["eval", "--home", str(tmp_path / "om"), "--experiment", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "5. two agents, control:" in out and "all 0.450" in out and "not measured: commons arm" in out
    (tmp_path / "summary.json").write_text("{not json")
    assert main(["eval", "--home", str(tmp_path / "om"), "--experiment", str(tmp_path)]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_other_commands_import_neither_matplotlib_nor_torch(tmp_path):
    code = ("import sys; from openmemory_local.cli.main import main; "
            f"main(['stats', '--home', {str(tmp_path / 'om')!r}]); main(['eval', '--home', {str(tmp_path / 'om')!r}]); "
            "bad = [m for m in ('matplotlib', 'torch', 'sentence_transformers') if m in sys.modules]; "
            "sys.exit(f'imported {bad}' if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# --- retrieval, measured ------------------------------------------------------------------------


def test_ranking_and_scores():
    corpus = ["git push: fatal: no upstream branch", "mix test: no secret_key_base", "Read: EISDIR a directory"]
    queries = ["the branch has no upstream when I git push", "mix test fails on secret_key_base"]
    bm25 = rank_bm25(queries, corpus)
    assert [order[0] for order in bm25] == [0, 1] and all(sorted(o) == [0, 1, 2] for o in bm25)
    hashed = rank("hashed", queries, corpus, exclude=[{1}, set()])
    assert 1 not in hashed[0] and hashed[1][0] == 1
    fused = fuse([bm25, [[2, 1, 0], [1, 2, 0]]])
    assert fused[1][0] == 1
    s = score([[2, 0, 1], [1, 0, 2]], [{0}, {1}], hard=[{2}, set()])
    assert s == {"queries": 2, "recall@1": 0.5, "recall@3": 1.0, "recall@10": 1.0, "mrr": 0.75, "confused": 1.0,
                 "with_hard": 1}
    with pytest.raises(ValueError, match="unknown retrieval method"):
        rank("nope", queries, corpus)


def test_the_labelled_set_matches_the_data_and_is_measured(shared_data, tmp_path):
    import retrieval as bench

    committed = json.loads(bench.SET.read_text())
    rebuilt = bench.rebuild(shared_data / "claude-code", out=tmp_path / "set.json")
    assert {(i["key"], i["surprise"]) for i in rebuilt["items"]} == {(i["key"], i["surprise"])
                                                                    for i in committed["items"]}
    result = bench.measure(committed["items"], methods=("hashed", "bm25", "fusion"))
    assert result["queries"] == 30 and result["surprises"] == 12
    for method in ("hashed", "bm25", "fusion"):
        r = result["methods"][method]
        assert r["recall@1"] <= r["recall@3"] <= r["recall@10"] and 0.5 < r["mrr"] <= 1.0
