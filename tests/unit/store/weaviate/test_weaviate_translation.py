"""Pure translation functions of the Weaviate backend (no server)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from weaviate.classes.config import DataType, Tokenization
from weaviate.collections.classes.config_methods import _collection_config_from_json
from weaviate.collections.classes.filters import _FilterAnd, _FilterValue, _Operator

import agentic_memory.store.weaviate as wv
import agentic_memory.store.weaviate.store as wv_store
from agentic_memory.kinds import PER_USER_COLLECTIONS
from agentic_memory.kinds.episodes import EPISODES, EPISODES_V2
from agentic_memory.kinds.facts import FACTS
from agentic_memory.kinds.knowledge import knowledge_collection
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.kinds.rules import RULES
from agentic_memory.store import (
    GLOBAL_SCOPE,
    CollectionSpec,
    InvalidInputError,
    Property,
    StoreError,
    Where,
)
from tests.unit.store.weaviate.conftest import server_schema
from tests.unit.store.weaviate.gofmt import go_v_float32

TENANT_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# -- tenants ----------------------------------------------------------------------------------


@pytest.mark.parametrize("user", ["alice", "Bob-42", "a_b", "7", "x" * 64])
def test_safe_user_ids_are_their_own_tenant(user: str) -> None:
    assert wv.tenant_name(user) == user


@pytest.mark.parametrize(
    "user", ["alice@example.com", "ünïcode", "with space", "x" * 65, "a.b", "-" * 3 + "/", "日本"]
)
def test_other_user_ids_hash_to_a_stable_valid_tenant(user: str) -> None:
    name = wv.tenant_name(user)
    assert TENANT_RE.match(name)
    assert name.startswith("_u") and len(name) == 50
    assert wv.tenant_name(user) == name


def test_tenant_names_never_collide_with_real_users_or_the_global_scope() -> None:
    users = ["alice@example.com", "alice@example.org", "x" * 65, "x" * 66, "a b", "a  b"]
    names = {wv.tenant_name(u) for u in users}
    assert len(names) == len(users)
    assert wv.tenant_name(GLOBAL_SCOPE) == GLOBAL_SCOPE
    assert GLOBAL_SCOPE not in names
    # Real user ids cannot start with "_" (the store reserves it), so no hash is a real id.
    assert all(n.startswith("_") for n in names)


# -- connection settings ----------------------------------------------------------------------


def test_connect_without_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEAVIATE_URL", raising=False)

    def boom(**_: Any) -> None:
        raise AssertionError("must not try to connect")

    monkeypatch.setattr(wv_store.weaviate, "connect_to_custom", boom)
    with pytest.raises(InvalidInputError, match="WEAVIATE_URL"):
        wv.WeaviateStore.connect(256)


def test_connect_passes_resolved_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Client:
        def close(self) -> None:
            pass

    def fake_connect(**kwargs: Any) -> Client:
        seen.update(kwargs)
        return Client()

    monkeypatch.setattr(wv_store.weaviate, "connect_to_custom", fake_connect)
    monkeypatch.setenv("WEAVIATE_URL", "https://weaviate.example.com")
    monkeypatch.setenv("WEAVIATE_API_KEY", "from-env")
    store = wv.WeaviateStore.connect(384, api_key="from-arg", headers={"X-A": "b"})
    assert store.dims == 384 and store.backend == "weaviate"
    assert seen["http_host"] == "weaviate.example.com" and seen["http_port"] == 443
    assert seen["http_secure"] is True and seen["grpc_secure"] is True
    assert seen["grpc_host"] == "weaviate.example.com" and seen["grpc_port"] == 50051
    assert seen["headers"] == {"X-A": "b"}
    assert seen["auth_credentials"].api_key == "from-arg"
    # Writes wait 30 s, not the client's 90: a cluster losing its leader (docs/weaviate.md).
    assert seen["additional_config"].timeout.insert == wv_store.WRITE_TIMEOUT_S == 30
    # No call to pypi.org for the client's version on each connect.
    assert seen["skip_init_checks"] is True
    with pytest.raises(InvalidInputError):
        wv.WeaviateStore.connect(0)


def test_an_unreachable_server_is_a_store_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> None:
        raise wv_store.weaviate.exceptions.WeaviateStartUpError("Connection refused")

    monkeypatch.setattr(wv_store.weaviate, "connect_to_custom", refuse)
    with pytest.raises(
        StoreError, match=r"cannot reach Weaviate at http://localhost:8080.*docker compose"
    ):
        wv.WeaviateStore.connect(256, "http://localhost:8080")


def test_connection_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEAVIATE_URL", "http://localhost:8080")
    monkeypatch.setenv("WEAVIATE_GRPC_PORT", "50052")
    monkeypatch.setenv("WEAVIATE_GRPC_HOST", "grpc.internal")
    s = wv.connection_settings()
    assert (s.http_host, s.http_port, s.http_secure) == ("localhost", 8080, False)
    assert (s.grpc_host, s.grpc_port, s.grpc_secure) == ("grpc.internal", 50052, False)
    assert s.api_key is None
    # Arguments win over the environment.
    s = wv.connection_settings("http://other:9000", grpc_port=6000, grpc_host="g")
    assert (s.http_host, s.http_port, s.grpc_host, s.grpc_port) == ("other", 9000, "g", 6000)
    assert wv.connection_settings("http://plain").http_port == 80


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://host", "http://", "http://host:99999"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidInputError):
        wv.connection_settings(url)


def test_bad_grpc_port_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEAVIATE_GRPC_PORT", "grpc")
    with pytest.raises(InvalidInputError, match="WEAVIATE_GRPC_PORT"):
        wv.connection_settings("http://localhost:8080")
    with pytest.raises(InvalidInputError):
        wv.connection_settings("http://localhost:8080", grpc_port=0)


def test_importing_the_backend_opens_no_connection() -> None:
    code = textwrap.dedent(
        """
        import socket
        import weaviate

        calls = []
        real_connect = socket.socket.connect
        def spy(self, *a, **k):
            calls.append(a)
            return real_connect(self, *a, **k)
        socket.socket.connect = spy
        weaviate.connect_to_custom = lambda **k: calls.append("connect_to_custom")
        weaviate.WeaviateClient.__init__ = lambda *a, **k: calls.append("client")

        import agentic_memory.store.weaviate
        assert agentic_memory.store.weaviate.WeaviateStore.backend == "weaviate"
        assert calls == [], calls
        print("no-connection")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "no-connection"


# -- schema -----------------------------------------------------------------------------------

ALL_SPECS = [*PER_USER_COLLECTIONS, knowledge_collection("docs")]


def _round_trip(spec: CollectionSpec, dims: int) -> tuple[CollectionSpec, int] | None:
    schema = server_schema(
        spec.name,
        description=wv.collection_description(spec, dims),
        properties=wv.weaviate_properties(spec),
        multi_tenancy_config=None,
    )
    schema["multiTenancyConfig"] = {"enabled": spec.per_user}
    config = _collection_config_from_json(schema)
    return wv.spec_from_config(
        config.name, config.description, config.multi_tenancy_config.enabled, config.properties
    )


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.name)
def test_specs_round_trip_through_weaviate_config(spec: CollectionSpec) -> None:
    loaded = _round_trip(spec, 256)
    assert loaded is not None
    back, dims = loaded
    assert dims == 256
    assert back == spec


def test_property_translation_details() -> None:
    props = {p.name: p for p in wv.weaviate_properties(FACTS)}
    # searchable + filterable text: word-tokenized for BM25, field-tokenized copy for filters
    assert props["subject"].dataType == DataType.TEXT
    assert props["subject"].indexSearchable is True and props["subject"].indexFilterable is False
    assert props["subject"].tokenization == Tokenization.WORD
    exact = props["subject" + wv.EXACT_SUFFIX]
    assert exact.indexFilterable is True and exact.indexSearchable is False
    assert exact.tokenization == Tokenization.FIELD
    # filter-only text matches whole values
    assert props["category"].tokenization == Tokenization.FIELD
    assert props["category"].indexSearchable is False
    # searchable only
    assert props["value"].indexFilterable is False and "value__exact" not in props
    assert props["current"].dataType == DataType.BOOL and props["current"].tokenization is None
    assert props["valid_from"].dataType == DataType.DATE
    assert props[wv.USER_PROPERTY].indexFilterable is False
    rules = {p.name: p for p in wv.weaviate_properties(RULES)}
    assert rules["version"].dataType == DataType.INT
    assert rules["source_users"].dataType == DataType.TEXT_ARRAY
    assert rules["source_users"].tokenization == Tokenization.FIELD
    assert wv.USER_PROPERTY not in {
        p.name for p in wv.weaviate_properties(knowledge_collection("k"))
    }


def test_reserved_property_names_are_refused() -> None:
    for name in (wv.USER_PROPERTY, "x" + wv.EXACT_SUFFIX):
        spec = CollectionSpec("Bad", (Property(name, "text"),), per_user=True)
        with pytest.raises(InvalidInputError, match="reserved"):
            wv.weaviate_properties(spec)


def test_description_marker() -> None:
    text = wv.collection_description(MESSAGES, 1536)
    assert wv.parse_description(text) == (MESSAGES.description, 1536)
    bare = CollectionSpec("Bare", (), per_user=False)
    assert wv.parse_description(wv.collection_description(bare, 8)) == ("", 8)
    assert wv.parse_description("someone else's collection") is None
    assert wv.parse_description(None) is None
    assert wv.spec_from_config("X", "foreign", False, []) is None


def test_schema_signature_ignores_descriptions_only() -> None:
    same = CollectionSpec(
        EPISODES.name,
        tuple(
            Property(p.name, p.type, p.searchable, p.filterable)
            for p in reversed(EPISODES.properties)
        ),
        per_user=True,
        description="other words",
    )
    assert wv.schema_signature(same) == wv.schema_signature(EPISODES)
    changed = CollectionSpec(EPISODES.name, EPISODES.properties[:-1], per_user=True)
    assert wv.schema_signature(changed) != wv.schema_signature(EPISODES)
    shared = CollectionSpec(EPISODES.name, EPISODES.properties, per_user=False)
    assert wv.schema_signature(shared) != wv.schema_signature(EPISODES)


# -- values -----------------------------------------------------------------------------------


def test_values_written_and_read_back() -> None:
    written = wv.to_weaviate_properties(
        FACTS,
        {
            "subject": "diet",
            "value": "vegetarian",
            "current": True,
            "valid_from": "2026-11-30T10:00:00+01:00",
            "valid_to": None,
        },
        "alice@example.com",
    )
    assert written == {
        "subject": "diet",
        "subject__exact": "diet",
        "value": "vegetarian",
        "current": True,
        "valid_from": "2026-11-30T09:00:00+00:00",
        wv.USER_PROPERTY: "alice@example.com",
    }
    raw = {
        **written,
        "valid_from": datetime(2026, 11, 30, 10, tzinfo=timezone(timedelta(hours=1))),
        "superseded_by": None,
    }
    assert wv.from_weaviate_properties(FACTS, raw) == {
        "subject": "diet",
        "value": "vegetarian",
        "current": True,
        "valid_from": "2026-11-30T09:00:00+00:00",
    }
    ep = wv.from_weaviate_properties(EPISODES, {"importance": 1, "context_tags": ("a", "b")})
    assert ep == {"importance": 1.0, "context_tags": ["a", "b"]}
    assert isinstance(ep["importance"], float)
    assert wv.to_weaviate_properties(EPISODES, {"importance": 1}, "u")["importance"] == 1.0


def test_dates_are_normalised_to_utc() -> None:
    # The embedded store's form: UTC isoformat (as the conformance suite checks).
    assert wv.rfc3339("2026-01-02T03:04:05Z") == "2026-01-02T03:04:05+00:00"
    assert wv.rfc3339("2026-01-02 03:04:05.5-02:00") == "2026-01-02T05:04:05.500000+00:00"
    assert wv.rfc3339(datetime(2026, 1, 2, tzinfo=UTC)) == "2026-01-02T00:00:00+00:00"


# -- filters ----------------------------------------------------------------------------------


def _leaf(f: Any) -> tuple[Any, Any, Any]:
    assert isinstance(f, _FilterValue)
    return f.target, f.operator, f.value


def test_single_conditions() -> None:
    cases = [
        (Where("category", "eq", "diet"), ("category", _Operator.EQUAL, "diet")),
        (Where("category", "ne", "diet"), ("category", _Operator.NOT_EQUAL, "diet")),
        (Where("subject", "eq", "diet"), ("subject__exact", _Operator.EQUAL, "diet")),
        (Where("current", "eq", False), ("current", _Operator.EQUAL, False)),
        (Where("category", "in", ["a", "b"]), ("category", _Operator.CONTAINS_ANY, ["a", "b"])),
    ]
    for cond, expected in cases:
        assert _leaf(wv.build_filter(FACTS, [cond])) == expected
    day = datetime(2026, 1, 1, tzinfo=UTC)
    date_cases = [
        ("gt", _Operator.GREATER_THAN),
        ("gte", _Operator.GREATER_THAN_EQUAL),
        ("lt", _Operator.LESS_THAN),
        ("lte", _Operator.LESS_THAN_EQUAL),
    ]
    for op, operator in date_cases:
        got = _leaf(wv.build_filter(FACTS, [Where("valid_from", op, "2026-01-01T00:00:00Z")]))
        assert got == ("valid_from", operator, day)
    assert _leaf(wv.build_filter(EPISODES, [Where("importance", "gte", 1)])) == (
        "importance",
        _Operator.GREATER_THAN_EQUAL,
        1.0,
    )
    assert isinstance(_leaf(wv.build_filter(EPISODES, [Where("importance", "gte", 1)]))[2], float)
    assert _leaf(wv.build_filter(RULES, [Where("version", "lt", 3)])) == (
        "version",
        _Operator.LESS_THAN,
        3,
    )
    # contains on text[]: any element equal to the value (exact copy when also searchable)
    assert _leaf(wv.build_filter(RULES, [Where("source_users", "contains", "bob")])) == (
        "source_users",
        _Operator.CONTAINS_ANY,
        ["bob"],
    )
    # Searchable and filterable (episodes before the prepared keyword text): the exact copy.
    assert _leaf(wv.build_filter(EPISODES_V2, [Where("context_tags", "contains", "travel")])) == (
        "context_tags__exact",
        _Operator.CONTAINS_ANY,
        ["travel"],
    )
    assert _leaf(wv.build_filter(EPISODES, [Where("context_tags", "contains", "travel")])) == (
        "context_tags",
        _Operator.CONTAINS_ANY,
        ["travel"],
    )


def test_conditions_are_combined_with_and() -> None:
    f = wv.build_filter(
        MESSAGES,
        [Where("thread_id", "eq", "t1"), Where("turn", "gte", 2), Where("role", "in", ["ai"])],
    )
    assert isinstance(f, _FilterAnd)
    assert [_leaf(x) for x in f.filters] == [
        ("thread_id", _Operator.EQUAL, "t1"),
        ("turn", _Operator.GREATER_THAN_EQUAL, 2),
        ("role", _Operator.CONTAINS_ANY, ["ai"]),
    ]
    assert wv.build_filter(MESSAGES, []) is None


def test_filters_serialise_to_grpc() -> None:
    from weaviate.collections.filters import _FilterToGRPC

    f = wv.build_filter(
        FACTS,
        [
            Where("subject", "eq", "diet"),
            Where("valid_from", "in", ["2026-01-01T00:00:00Z", "2026-01-02T00:00:00+02:00"]),
        ],
    )
    grpc = _FilterToGRPC.convert(f)
    assert grpc is not None
    assert [c.target.property for c in grpc.filters] == ["subject__exact", "valid_from"]


# -- scores -----------------------------------------------------------------------------------

ID = "2d628e6a-565c-47b3-8e8a-6c0924358ec0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"Hybrid (Result Set vector,hybridVector) Document {ID}: original score 0.3755169, "
            f"normalized score: 0.35678205 - \nHybrid (Result Set keyword,bm25) Document {ID}: "
            "original score 6.4637876, normalized score: 0.4792187",
            (float(np.float32(6.4637876)), float(np.float32(0.3755169))),
        ),
        (
            f"Hybrid (Result Set vector) Document {ID}: original score 0.34787154, normalized "
            "score: 0.23426087",
            (None, float(np.float32(0.34787154))),
        ),
        (
            f"Hybrid (Result Set keyword) Document {ID}: original score 1.5e-01, normalized score: 1",
            (float(np.float32(0.15)), None),
        ),
        ("", (None, None)),
        (None, (None, None)),
        ("something else entirely", (None, None)),
        (f"Hybrid (Result Set vector) Document {ID}: original score nan", (None, None)),
    ],
)
def test_explain_score_parsing(
    text: str | None, expected: tuple[float | None, float | None]
) -> None:
    assert wv.parse_explain_score(text) == expected


def test_explain_scores_read_back_as_the_servers_float32_values() -> None:
    # D10: the server prints float32 scores with %v; read as float64 decimals they almost
    # never equal the embedded store's float32 values.
    rng = np.random.default_rng(7)
    values = (rng.standard_normal(5000) * 10.0 ** rng.integers(-9, 9, 5000)).astype(np.float32)
    mismatched_as_float64 = 0
    for value in values:
        text = go_v_float32(float(value))
        assert wv.parse_float32(text) == float(value), text
        line = f"Hybrid (Result Set keyword,bm25) Document {ID}: original score {text}, normalized"
        assert wv.parse_explain_score(line) == (float(value), None)
        mismatched_as_float64 += float(text) != float(value)
    assert mismatched_as_float64 > 4500


def test_float32_parsing_is_not_fooled_by_double_rounding() -> None:
    # 1 + 2**-24 + 2**-60 lies just above the midpoint between the float32s 1 and 1 + 2**-23;
    # the nearest float64 is the midpoint itself, which float32 rounds (to even) down to 1.
    text = str(Decimal(1) + Decimal(2) ** -24 + Decimal(2) ** -60)
    assert float(np.float32(float(text))) == 1.0
    assert wv.parse_float32(text) == 1.0 + 2.0**-23
    assert wv.parse_float32("3.4028235e+38") == float(np.finfo(np.float32).max)
    assert wv.parse_float32("-0") == 0.0
    with pytest.raises(ValueError):
        wv.parse_float32("score")


def test_deep_listings_sort_like_the_server() -> None:
    from agentic_memory.store import CollectionSpec, Property, StoredObject

    spec = CollectionSpec(
        name="S",
        per_user=True,
        properties=(Property("name", "text"), Property("at", "date"), Property("n", "int")),
    )
    objs = [
        StoredObject("00000000-0000-0000-0000-00000000000" + k, props)
        for k, props in [
            ("1", {"name": "banana", "at": "2026-01-01T10:00:00+02:00", "n": 2}),
            ("2", {"name": "Apple", "at": "2026-01-01T09:00:00+00:00", "n": 10}),
            ("3", {"name": "apple"}),
            ("4", {}),
        ]
    ]
    order = lambda key, desc=False: [  # noqa: E731
        o.id[-1] for o in wv.sort_like_weaviate(spec, objs, key, desc)
    ]
    # Missing values first ascending and last descending; EqualFold-equal text ties by id.
    assert order("name") == ["4", "2", "3", "1"]
    assert order("name", True) == ["1", "2", "3", "4"]
    assert order("at") == ["3", "4", "1", "2"]  # 08:00 UTC before 09:00 UTC
    assert order("n", True) == ["2", "1", "3", "4"]
    assert order(None) == ["1", "2", "3", "4"]
