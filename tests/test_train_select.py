"""train/select.py's choice, hand-computed (the end-to-end selection in a training run is
tests/test_train_pipeline.py::test_selection_exports_the_best_evaluated_candidate)."""
from train.select import best, rank


def row(it, falls, stood=20, track=5.0, fell_at=None):
    return {"iteration": it, "falls": falls, "stood_at_end": stood, "tracking_error_cm": track, "mean_fell_at_s": fell_at}


def test_rank_is_falls_then_standing_then_tracking_then_the_later_iteration():
    rows = [row(100, 2, 18, 4.0), row(200, 0, 19, 4.0), row(300, 0, 20, 9.0), row(400, 0, 20, 6.0),
            row(500, 0, 20, 6.0), {"iteration": 600, "falls": None, "error": "python -m eval exited 2"}]
    assert [r["iteration"] for r in sorted(rows, key=rank)] == [500, 400, 300, 200, 100, 600]
    assert best(rows)["iteration"] == 500
    assert best(rows[:1] + rows[-1:])["iteration"] == 100  # a failed evaluation never wins over a measured one


def test_select_every_must_be_a_multiple_of_the_checkpoint_interval(capsys):
    import pytest

    from train.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--motion", "hop", "--select-every", "30"])
    assert e.value.code == 2 and "use a multiple of 25" in capsys.readouterr().err


def test_among_candidates_that_all_fall_the_latest_fall_wins_before_the_tracking_error():
    rows = [row(250, 10, 0, 8.6, 1.60), row(500, 10, 0, 9.9, 2.40), row(750, 10, 0, 8.1, 1.70), row(1000, 9, 0, 12.0, 3.0)]
    assert [r["iteration"] for r in sorted(rows, key=rank)] == [1000, 500, 750, 250]
    assert best(rows[:3])["iteration"] == 500  # by the error alone: 750


def test_reselect_reranks_a_runs_candidates_from_their_eval_files(tmp_path):
    """Two candidates that both fall twice: the one whose falls come later is chosen, whatever the old choice."""
    import json

    from train.select import main, reselect

    cands = []
    for it, fell_at, err in ((100, (1.0, 1.2), 5.0), (200, (2.0, 2.4), 7.0)):
        ev = tmp_path / f"eval{it}.json"
        ev.write_text(json.dumps({"episodes": 3, "falls": 2, "stood_at_end": 1, "tracking_error_cm": err,
                                  "per_episode": [{"fell": True, "fell_at_s": t} for t in fell_at] + [{"fell": False}]}))
        cands.append({"iteration": it, "artifact": f"select/it{it}/hop", "eval_json": str(ev)})
    cands.append({"iteration": 300, "artifact": "select/it300/hop", "falls": None, "error": "python -m eval exited 2"})
    (tmp_path / "select").mkdir()
    (tmp_path / "select" / "select.json").write_text(json.dumps({"selected_iteration": 100, "candidates": cands}))
    out = reselect(tmp_path)
    assert out["selected_iteration"] == 200 and "latest mean fall" in out["rule"]
    assert [c["mean_fell_at_s"] for c in out["candidates"][:2]] == [1.1, 2.2] and out["candidates"][2]["falls"] is None
    assert json.loads((tmp_path / "select" / "select.json").read_text())["selected_iteration"] == 200
    assert main([str(tmp_path)]) == 0 and main([str(tmp_path / "none")]) == 2


def test_reselect_finds_the_candidates_of_a_run_that_stopped_before_select_json(tmp_path, capsys):
    """Exported candidates select/it<N>/<motion>/ and eval.json files that name them: it200 falls later and is
    chosen; it300 was exported but never evaluated (ranks last)."""
    import json

    from train.select import main, reselect

    sel = tmp_path / "select"
    for it, fell_at in ((100, (1.0,)), (200, (3.0,)), (300, None)):
        (sel / f"it{it}" / "hop").mkdir(parents=True)
        (sel / f"it{it}" / "hop" / "policy.yaml").write_text("format: test\n")
        if fell_at:
            ev = sel / "eval" / "hop" / f"stamp{it}" / "eval.json"
            ev.parent.mkdir(parents=True)
            ev.write_text(json.dumps({"policy": str(sel / f"it{it}" / "hop"), "episodes": 1, "falls": 1,
                                      "stood_at_end": 0, "tracking_error_cm": 5.0,
                                      "per_episode": [{"fell": True, "fell_at_s": t} for t in fell_at]}))
    out = reselect(tmp_path)
    assert [c["iteration"] for c in out["candidates"]] == [100, 200, 300] and out["selected_iteration"] == 200
    assert out["candidates"][2]["falls"] is None and (sel / "select.json").is_file()
    assert main([str(tmp_path)]) == 0 and "selected iteration 200" in capsys.readouterr().out
    assert main([str(tmp_path / "none")]) == 2 and "no exported candidates" in capsys.readouterr().out
