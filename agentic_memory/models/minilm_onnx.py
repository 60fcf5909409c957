"""all-MiniLM-L6-v2 run by onnxruntime, from an ONNX graph built here out of the packaged weights.

No package ships an ONNX export of MiniLM and exporting one needs torch, so the BERT encoder
is written as an ONNX graph with the ``onnx`` helper API straight from ``model.safetensors``
(the same weights and the same arithmetic as :mod:`agentic_memory.models.minilm`), then
optionally quantised to int8 by onnxruntime's dynamic quantiser (weights int8 per output
channel, activations quantised at run time). onnxruntime runs it several times faster than
numpy: its kernels are fused (LayerNorm + residual, bias + GELU) and chosen at run time by the
CPU's cpuid, so one wheel runs on every x86-64 and ARM64 CPU (nothing is compiled here).

The built file is cached under ``$AMEM_HOME/models/`` and named by a hash of the weights, the
variant and this builder's version. It is built once: a lock file serialises builders across
processes, the file is written to a temporary name and renamed into place, and its SHA-256 is
recorded beside it. A file that does not match its record (a crash mid-write on a filesystem
without atomic rename, a truncated copy, a bit flip) is rebuilt, never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from agentic_memory.models.minilm import encode_by_length
from agentic_memory.paths import amem_home, locked_file, private_dir

logger = logging.getLogger(__name__)

Matrix = npt.NDArray[np.float32]
Variant = Literal["fp32", "int8"]

# Bumped whenever the graph or the quantisation changes: old cache files are then ignored.
BUILDER_VERSION = 3
OPSET = 17


class OnnxRuntimeMissingError(RuntimeError):
    """onnxruntime or onnx is not installed."""


def require_onnxruntime() -> tuple[Any, Any]:
    """Import onnx and onnxruntime, or say how to install them.

    Raises:
        OnnxRuntimeMissingError: Either is not installed.
    """
    try:
        import onnx  # noqa: PLC0415  (heavy; only this model needs it)
        import onnxruntime  # noqa: PLC0415
    except ImportError as exc:
        raise OnnxRuntimeMissingError(
            f"AMEM_EMBEDDINGS=minilm runs MiniLM in onnxruntime, which is not installed ({exc}): "
            "`pip install 'langgraph-agentic-memory[minilm]'` (onnxruntime and onnx), or "
            "AMEM_EMBEDDINGS=minilm-numpy for the slower numpy encoder"
        ) from exc
    return onnx, onnxruntime


def weights_digest(folder: Path) -> str:
    """SHA-256 of the files the graph is built from (weights and config)."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        digest.update(name.encode())
        with (folder / name).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_graph(folder: Path) -> Any:
    """Write the BERT encoder of ``folder`` as an ONNX model (mean-pooled, not normalised).

    Inputs ``input_ids`` and ``attention_mask`` (int64, batch × length); output
    ``pooled`` (float32, batch × hidden).
    """
    onnx, _ = require_onnxruntime()
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415
    from safetensors.numpy import load_file  # noqa: PLC0415

    config = json.loads((folder / "config.json").read_text())
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    dims = int(config["hidden_size"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    if dims % heads:
        raise ValueError(f"hidden_size {dims} is not divisible by {heads} heads")
    raw = load_file(str(folder / "model.safetensors"))

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: npt.ArrayLike, dtype: Any = np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def weight(key: str, transpose: bool = False) -> str:
        matrix = raw[key].astype(np.float32)
        if transpose:
            # Stored (out, in); transposed once so every projection is x @ W.
            matrix = np.ascontiguousarray(matrix.T)
        return const(key, matrix)

    counter = iter(range(1 << 30))

    def node(op: str, inputs: Sequence[str], domain: str = "", **attrs: Any) -> str:
        out = f"{op.lower()}_{next(counter)}"
        nodes.append(helper.make_node(op, list(inputs), [out], domain=domain, **attrs))
        return out

    def skip_layer_norm(inp: str, skip: str, prefix: str) -> str:
        # LayerNorm(inp + skip + dense bias): the residual block's tail in one kernel.
        return node(
            "SkipLayerNormalization",
            [
                inp,
                skip,
                weight(f"{prefix}.LayerNorm.weight"),
                weight(f"{prefix}.LayerNorm.bias"),
                weight(f"{prefix}.dense.bias"),
            ],
            domain="com.microsoft",
            epsilon=eps,
        )

    def layer_norm(inp: str, prefix: str) -> str:
        return node(
            "LayerNormalization",
            [inp, weight(f"{prefix}.weight"), weight(f"{prefix}.bias")],
            axis=-1,
            epsilon=eps,
        )

    # Embeddings: word + position (sliced to the batch's length) + token type 0.
    word = node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"], axis=0)
    length = node(
        "Slice",
        [
            node("Shape", ["input_ids"]),
            const("one_i", [1], np.int64),
            const("two_i", [2], np.int64),
        ],
    )
    positions = node(
        "Slice",
        [
            weight("embeddings.position_embeddings.weight"),
            const("zero_i", [0], np.int64),
            length,
            "zero_i",
        ],
    )
    token_type = const(
        "token_type_row", raw["embeddings.token_type_embeddings.weight"][0].astype(np.float32)
    )
    x = node("Add", [node("Add", [word, positions]), token_type])
    x = layer_norm(x, "embeddings.LayerNorm")

    # onnxruntime's fused CPU kernels (com.microsoft domain): one Attention op per layer
    # (Q, K and V projected by one matrix, the padding mask applied inside), LayerNorm fused
    # with the residual add and the bias, and bias + exact (erf) GELU in one pass.
    mask_i32 = node("Cast", ["attention_mask"], to=TensorProto.INT32)
    for i in range(layers):
        p = f"encoder.layer.{i}."
        qkv = [f"{p}attention.self.{name}" for name in ("query", "key", "value")]
        qkv_weight = const(
            f"{p}qkv.weight",
            np.concatenate([raw[f"{n}.weight"].astype(np.float32).T for n in qkv], axis=1),
        )
        qkv_bias = const(
            f"{p}qkv.bias",
            np.concatenate([raw[f"{n}.bias"].astype(np.float32) for n in qkv]),
        )
        context = node(
            "Attention",
            [x, qkv_weight, qkv_bias, mask_i32],
            domain="com.microsoft",
            num_heads=heads,
        )
        projected = node(
            "MatMul", [context, weight(f"{p}attention.output.dense.weight", transpose=True)]
        )
        x = skip_layer_norm(projected, x, f"{p}attention.output")
        hidden = node(
            "BiasGelu",
            [
                node("MatMul", [x, weight(f"{p}intermediate.dense.weight", transpose=True)]),
                weight(f"{p}intermediate.dense.bias"),
            ],
            domain="com.microsoft",
        )
        projected = node("MatMul", [hidden, weight(f"{p}output.dense.weight", transpose=True)])
        x = skip_layer_norm(projected, x, f"{p}output")

    mask_f = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    weights_col = node("Unsqueeze", [mask_f, const("axis_2", [2], np.int64)])
    summed = node("ReduceSum", [node("Mul", [x, weights_col]), "one_i"], keepdims=0)
    count = node(
        "Max",
        [node("ReduceSum", [weights_col, "one_i"], keepdims=0), const("tiny", np.float32(1e-9))],
    )
    nodes.append(helper.make_node("Div", [summed, count], ["pooled"]))

    graph = helper.make_graph(
        nodes,
        "minilm",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", dims])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        producer_name="agentic_memory",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def models_home() -> Path:
    """Return the folder of built models: ``$AMEM_HOME/models`` (default ``~/.agentic-memory``)."""
    return amem_home() / "models"


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _valid(path: Path, record: Path) -> bool:
    try:
        expected = record.read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return False
    return path.is_file() and _file_digest(path) == expected


def _build_bytes(folder: Path, variant: Variant) -> bytes:
    onnx, _ = require_onnxruntime()
    model = build_graph(folder)
    data: bytes = model.SerializeToString()
    if variant == "fp32":
        return data
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="amem-minilm-") as tmp:
        source, target = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        source.write_bytes(data)
        # The weight matrices only (MatMul, and Attention's QKV), one scale per output
        # channel. reduce_range keeps weights to 7 bits: the AVX2 int8 kernel (u8 x s8 pairs
        # summed into int16, vpmaddubsw) saturates on full-range weights while the VNNI and AMX
        # kernels do not, so full range would give different vectors on different CPUs; with 7
        # bits every kernel computes the same exact integer products.
        quantize_dynamic(
            source,
            target,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul", "Attention"],
            # Shape inference cannot type the outputs of the com.microsoft ops; all are float.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        return target.read_bytes()


def ensure_model_file(folder: Path, variant: Variant, home: Path | None = None) -> Path:
    """Return the built model for ``folder``'s weights, building it once if needed.

    Safe across processes: builders take a lock, write to a temporary file and rename it into
    place, then record its SHA-256; a file that does not match its record is rebuilt.
    """
    require_onnxruntime()
    home = private_dir(home or models_home())
    key = hashlib.sha256(
        f"{weights_digest(folder)}:{variant}:{BUILDER_VERSION}".encode()
    ).hexdigest()[:16]
    path = home / f"minilm-{variant}-{key}.onnx"
    record = path.with_name(path.name + ".sha256")
    if _valid(path, record):
        return path
    # flock: the kernel releases it when its holder dies, so a killed builder blocks no one.
    with locked_file(path.with_name(path.name + ".lock")):
        if _valid(path, record):  # another process built it while this one waited
            return path
        logger.info("building the %s MiniLM ONNX model into %s (once)", variant, path)
        data = _build_bytes(folder, variant)
        with contextlib.suppress(FileNotFoundError):
            record.unlink()
        _write_atomic(path, data)
        _write_atomic(record, hashlib.sha256(data).hexdigest().encode())
    return path


class OnnxMiniLM:
    """A BERT sentence encoder (mean pooling, normalised) run by onnxruntime.

    Args:
        model_dir: Folder with ``config.json``, ``tokenizer.json`` and ``model.safetensors``.
        variant: "fp32" (the same vectors as the numpy encoder) or "int8" (dynamic
            quantisation; faster, slightly different vectors).
        threads: onnxruntime intra-op threads (default: the CPUs this process may use).
        max_length: Longest input in tokens; longer texts are truncated (256 for MiniLM).
        home: Where built models are cached (default ``$AMEM_HOME/models``).
    """

    def __init__(
        self,
        model_dir: str | Path,
        variant: Variant = "int8",
        threads: int | None = None,
        max_length: int = 256,
        home: Path | None = None,
    ) -> None:
        _, ort = require_onnxruntime()
        from tokenizers import Tokenizer  # noqa: PLC0415

        folder = Path(model_dir)
        self.variant = variant
        self.dims = int(json.loads((folder / "config.json").read_text())["hidden_size"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # The shipped tokenizer pads and truncates to 128; batches are padded here instead.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_length)
        self.path = ensure_model_file(folder, variant, home)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or _available_cpus()
        options.inter_op_num_threads = 1
        # Spinning threads steal the CPU from everything else on a shared machine.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(
            str(self.path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> Matrix:
        """Embed texts as L2-normalised float32 rows, in input order.

        Batches group texts of similar token length so little padding is computed. The int8
        model runs one text at a time: its activations are quantised with one scale per
        tensor, so a text batched with others (and their padding) would get a slightly
        different vector (cosine down to 0.98) than alone; alone, a text's vector depends on
        the text only, at ~10 % of the speed.
        """
        if self.variant == "int8":
            batch_size = 1

        def forward(ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> Matrix:
            (pooled,) = self.session.run(["pooled"], {"input_ids": ids, "attention_mask": mask})
            rows: Matrix = pooled
            return rows

        return encode_by_length(self.tokenizer, texts, self.dims, batch_size, forward)


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
