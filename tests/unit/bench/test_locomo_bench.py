"""The LoCoMo recall benchmark: its scoring, its reading of the format, and a run end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import recall_ablation
from bench.locomo_bench import (
    SYSTEMS,
    LocomoFormatError,
    QuestionScore,
    load_locomo,
    main,
    percentile,
    score_ranking,
    summarise,
)
from tests.fake_openai import FakeOpenAIServer


def _turn(dia: str, speaker: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": dia, "text": text, **extra}


def _sample(sample_id: str) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Jon",
            "speaker_b": "Gina",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                _turn("D1:1", "Jon", "Hey Gina, I started learning the cello last month."),
                _turn("D1:2", "Gina", "Wow! How is it going?"),
                _turn("D1:3", "Jon", "Slowly, my teacher is patient though."),
                _turn(
                    "D1:4",
                    "Gina",
                    "I opened a dance studio downtown.",
                    blip_caption="a photo of an empty dance floor",
                ),
            ],
            "session_2_date_time": "10:04 am on 20 May, 2023",
            "session_2": [
                _turn("D2:1", "Gina", "The studio had its first recital yesterday."),
                _turn("D2:2", "Jon", "Congratulations! I lost my job at the bank, sadly."),
                _turn("D2:3", "Gina", "Sorry to hear that. What will you do next?"),
                _turn("D2:4", "Jon", "Maybe open a small bakery."),
            ],
        },
        "qa": [
            {
                "question": "Which instrument is Jon learning?",
                "answer": "cello",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Where did Jon work before?",
                "answer": "a bank",
                "evidence": ["D2:2 "],
                "category": 1,
            },
            {
                "question": "What business did Gina open, and when was its recital?",
                "answer": "a dance studio",
                "evidence": ["D1:4; D2:1"],
                "category": 2,
            },
            {
                "question": "What did Gina bake?",
                "answer": "nothing",
                "evidence": ["D2:4"],
                "category": 5,
            },
            {
                "question": "A question whose evidence names no turn",
                "answer": "-",
                "evidence": ["D9:9"],
                "category": 4,
            },
        ],
    }


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps([_sample("conv-a"), _sample("conv-b")]), encoding="utf-8")
    return path


# -- scoring ---------------------------------------------------------------------------------


def test_recall_hit_and_reciprocal_rank() -> None:
    recall, hit, rr = score_ranking(
        ["x", "e1", "x", "y", "e2", "z"], ["e1", "e2", "e3"], ks=(1, 2, 5)
    )
    # The repeated "x" counts once: e2 is 4th of the distinct ids.
    assert recall == {1: 0.0, 2: pytest.approx(1 / 3), 5: pytest.approx(2 / 3)}
    assert hit == {1: 0.0, 2: 1.0, 5: 1.0}
    assert rr == pytest.approx(1 / 2)
    assert score_ranking(["a", "b"], ["c"], ks=(1, 2))[2] == 0.0
    # The reciprocal rank only looks within the deepest k.
    assert score_ranking(["a", "b", "c"], ["c"], ks=(1, 2))[2] == 0.0
    with pytest.raises(ValueError, match="at least one evidence"):
        score_ranking(["a"], [])


def test_summaries_average_questions_and_percentiles_interpolate() -> None:
    scores = [
        QuestionScore(1, {1: 1.0, 5: 1.0}, {1: 1.0, 5: 1.0}, 1.0),
        QuestionScore(2, {1: 0.0, 5: 0.5}, {1: 0.0, 5: 1.0}, 0.25),
    ]
    s = summarise(scores, ks=(1, 5))
    assert (s.questions, s.recall, s.hit, s.mrr) == (2, {1: 0.5, 5: 0.75}, {1: 0.5, 5: 1.0}, 0.625)
    assert summarise([], ks=(1,)).questions == 0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0


# -- reading the format ----------------------------------------------------------------------


def test_loads_sessions_dates_captions_and_evidence(locomo_file: Path) -> None:
    convs = load_locomo(locomo_file)
    assert [c.sample_id for c in convs] == ["conv-a", "conv-b"]
    conv = convs[0]
    assert (conv.speaker_a, conv.speaker_b, conv.turns) == ("Jon", "Gina", 8)
    assert [s.date.isoformat() for s in conv.sessions] == [
        "2023-05-08T13:56:00+00:00",
        "2023-05-20T10:04:00+00:00",
    ]
    assert conv.sessions[0].turns[3].text == (
        "I opened a dance studio downtown. [shared a photo: a photo of an empty dance floor]"
    )
    # "D2:2 " and "D1:4; D2:1" are read as dia_ids; "D9:9" names no turn: skipped.
    assert [q.evidence for q in conv.questions] == [
        ("D1:1",),
        ("D2:2",),
        ("D1:4", "D2:1"),
        ("D2:4",),
    ]
    assert conv.skipped_questions == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not a readable JSON file"),
        ("[]", "non-empty JSON list"),
        ('[{"conversation": {}}]', "needs a 'conversation' object and a 'qa' list"),
        ('[{"conversation": {"speaker_a": "A", "speaker_b": "B"}, "qa": []}]', "no 'session_<n>'"),
        (
            '[{"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": '
            '[{"dia_id": "D1:1", "text": "x"}, {"dia_id": "D1:1", "text": "y"}]}, "qa": []}]',
            "appears twice",
        ),
        (
            '[{"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": []}, '
            '"qa": [{"question": "q", "category": "x"}]}]',
            "integer 'category'",
        ),
    ],
)
def test_a_malformed_file_is_refused_with_its_place(
    tmp_path: Path, content: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LocomoFormatError, match=message):
        load_locomo(path)
    assert main([str(path), "--systems", "amem"]) == 2
    assert message.split("'")[0] in capsys.readouterr().err


def test_unknown_systems_and_missing_files_are_refused(
    tmp_path: Path, locomo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([str(locomo_file), "--systems", "amem,nope"])
    assert "unknown system(s) nope" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main([str(locomo_file), "--conversations", "7"]) == 2


# -- end to end --------------------------------------------------------------------------------


def _run(path: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    out, js = tmp_path / "recall.md", tmp_path / "recall.json"
    assert main([str(path), "--out", str(out), "--json", str(js), *extra]) == 0
    table = out.read_text(encoding="utf-8")
    assert table.startswith("Data: `tiny-locomo.json` (2 conversations, 16 turns, 8 questions")
    report: dict[str, Any] = json.loads(js.read_text(encoding="utf-8"))
    return report


def test_every_system_runs_end_to_end_on_a_tiny_file(locomo_file: Path, tmp_path: Path) -> None:
    report = _run(locomo_file, tmp_path, "--embeddings", "local")
    results = {r["name"]: r for r in report["results"]}
    assert list(results) == list(SYSTEMS)
    assert report["skipped_questions"] == 2
    for name, r in results.items():
        overall = r["overall"]
        # Categories 1-4 only: three questions per conversation; category 5 apart.
        assert overall["questions"] == 6, name
        assert r["per_category"]["5"]["questions"] == 2, name
        # Eight turns per conversation: the top 20 holds every evidence turn.
        assert overall["recall"]["20"] == 1.0, name
        assert 0.0 < overall["mrr"] <= 1.0, name
        assert r["latency_p95_ms"] >= r["latency_p50_ms"] > 0, name
    # A question that shares its rare word with one turn only: keyword search ranks it first.
    assert results["amem-keyword"]["per_category"]["4"]["hit"]["1"] == 1.0
    assert results["amem"]["index_turns_per_s"] > 0
    assert results["amem-keyword"]["shares_index_with"] == "amem"


def test_an_openai_compatible_embedding_endpoint_is_used_when_configured(
    locomo_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAIServer(embedding_dims=48) as server:
        monkeypatch.setenv("AMEM_EMBEDDINGS", "openai:fake-embed")
        monkeypatch.setenv("AMEM_EMBEDDINGS_BASE_URL", server.base_url)
        monkeypatch.setenv("AMEM_EMBEDDINGS_DIMS", "48")
        report = _run(locomo_file, tmp_path, "--systems", "amem,amem-vector,langgraph")
        requests = list(server.embedding_requests)
    assert report["embeddings"] == "openai:fake-embed (48-d)"
    sent = [
        t for r in requests for t in ([r["input"]] if isinstance(r["input"], str) else r["input"])
    ]
    assert "Jon: Hey Gina, I started learning the cello last month." in sent
    assert "Which instrument is Jon learning?" in sent
    assert all(r["model"] == "fake-embed" for r in requests)
    names = [r["name"] for r in report["results"]]
    assert names == ["amem", "amem-vector", "langgraph"]
    assert all(r["overall"]["recall"]["20"] == 1.0 for r in report["results"])


def test_the_ablation_runs_every_variant_and_its_default_row_is_the_benchmarks(
    locomo_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMEM_EMBEDDINGS", "local")
    out = tmp_path / "ablation.md"
    printed: list[str] = []
    assert recall_ablation.main([str(locomo_file), "--out", str(out)], say=printed.append) == 0
    table = out.read_text(encoding="utf-8")
    assert table.strip() == printed[0].strip()
    rows = {
        cells[0]: cells[1:]
        for line in table.splitlines()[2:]
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert list(rows) == [v.name for v in recall_ablation.VARIANTS]
    report = _run(locomo_file, tmp_path, "--embeddings", "local", "--systems", "amem")
    (amem,) = report["results"]
    default = rows[recall_ablation.DEFAULT]
    assert default[0] == f"{amem['overall']['recall']['10']:.3f}"
    assert default[1] == f"{amem['overall']['mrr']:.3f}"
