r"""The model and hardware catalog: descriptors in ``models/`` (one TOML file per entry).

Three kinds of entries (see ``models/README.md``):

``verifiers/*.toml``
    LLM architectures from the public Hugging Face ``config.json`` — layers, hidden size,
    attention / KV heads, head dim, MLP width, vocabulary, experts ``M`` and experts per token
    ``m`` — plus the model card's parameter totals (used only as a cross-check).
``drafters/*.toml``
    EAGLE-3-style one-layer heads (geometry derived from their verifier, assumptions marked in
    the file) and vanilla drafters (a pointer to a verifier entry).
``hardware/*.toml``
    HBM capacity and bandwidth, dense BF16 FLOP/s, NVLink bandwidth, and two *assumed*
    achievable fractions.

Where the catalog lives
-----------------------
The package is installed editable (``pip install -e .``), so the catalog is found relative to
the repository root: ``<repo>/models`` next to the ``specbayes/`` package folder. The
environment variable ``SPECBAYES_MODELS`` overrides that. A missing folder raises
:class:`FileNotFoundError` naming both places looked at.

Parameter counts
----------------
Every count is derived from the architecture (so the cost model and the cross-check share one
definition). Per decoder layer, with hidden size :math:`h`, query heads :math:`n_q`, KV heads
:math:`n_{kv}`, head dim :math:`d`, MLP width :math:`I`:

.. math::

    P_\mathrm{attn} = h\,(n_q d) + 2\,h\,(n_{kv} d) + (n_q d)\,h, \qquad
    P_\mathrm{mlp} = 3\,h\,I \;(\text{SwiGLU: gate, up, down})

An MoE layer replaces the MLP by ``M`` experts of :math:`3\,h\,I_e` each plus a router
:math:`h M`; a token uses ``m`` of them. Embedding and LM head are :math:`V h` each (one
matrix if tied). Norms and biases are ignored (< 0.1 %).
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

__all__ = [
    "DrafterSpec",
    "Geometry",
    "HardwareSpec",
    "ModelSpec",
    "catalog_dir",
    "list_entries",
    "load_drafter",
    "load_hardware",
    "load_model",
]

_KINDS = ("verifiers", "drafters", "hardware")


def catalog_dir() -> Path:
    """The ``models/`` folder: ``$SPECBAYES_MODELS`` or ``<repo root>/models``.

    Raises
    ------
    FileNotFoundError
        If neither exists (e.g. a non-editable install without the repository).
    """
    env = os.environ.get("SPECBAYES_MODELS")
    here = Path(__file__).resolve().parent.parent / "models"
    candidates = [Path(env)] if env else []
    candidates.append(here)
    for path in candidates:
        if (path / "verifiers").is_dir():
            return path
    raise FileNotFoundError(
        "model catalog not found: looked in "
        + " and ".join(str(p) for p in candidates)
        + " (the catalog ships in the repository's models/ folder; install specbayes editable "
        "from a checkout, or set SPECBAYES_MODELS)"
    )


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


@cache
def _index(kind: str, root: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(Path(root, kind).glob("*.toml")):
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
        for alias in [raw.get("name", path.stem), path.stem, *raw.get("aliases", [])]:
            out[_norm(alias)] = path
    return out


def list_entries(kind: str) -> list[str]:
    """Names of the catalog entries of one kind (``verifiers``, ``drafters``, ``hardware``)."""
    if kind not in _KINDS:
        raise ValueError(f"unknown catalog kind {kind!r}; choose one of {', '.join(_KINDS)}")
    root = catalog_dir()
    names = []
    for path in sorted((root / kind).glob("*.toml")):
        with path.open("rb") as fh:
            names.append(tomllib.load(fh).get("name", path.stem))
    return names


def _load(kind: str, name: str) -> tuple[dict, Path]:
    root = catalog_dir()
    index = _index(kind, str(root))
    path = index.get(_norm(name))
    if path is None:
        raise ValueError(
            f"unknown {kind[:-1] if kind != 'hardware' else 'hardware'} {name!r}; "
            f"the catalog ({root / kind}) has: {', '.join(list_entries(kind))}"
        )
    with path.open("rb") as fh:
        return tomllib.load(fh), path


@dataclass(frozen=True)
class Geometry:
    r"""What the cost model needs to know about one network (verifier or drafter).

    Attributes
    ----------
    layers : int
        Decoder layers.
    hidden : int
        Hidden size.
    q_heads, kv_heads, head_dim : int
        Attention geometry.
    streamed_params : float
        Non-expert weights read from HBM on every forward pass: all layer weights except the
        experts, plus the LM head (the input embedding is only looked up, not streamed).
    expert_params : float
        Parameters of one expert in one layer (0 for dense networks).
    num_experts, experts_per_tok : int
        ``M`` and ``m`` (0 for dense networks).
    lm_head_params : float
        :math:`h V` of the (draft) LM head — computed only for sampled positions.
    resident_params : float
        Parameters held in GPU memory (for the KV-cache budget).
    weight_bytes, expert_weight_bytes, kv_bytes : float
        Bytes per weight, per expert weight and per KV-cache element.
    sliding_window, sliding_layers : int
        Layers whose attention only reads the last ``sliding_window`` tokens.
    """

    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    streamed_params: float
    expert_params: float
    num_experts: int
    experts_per_tok: int
    lm_head_params: float
    resident_params: float
    weight_bytes: float
    expert_weight_bytes: float
    kv_bytes: float
    sliding_window: int = 0
    sliding_layers: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def active_layer_params(self) -> float:
        """Layer weights multiplied by one token (non-expert plus ``m`` experts, all layers)."""
        return (
            self.streamed_params
            - self.lm_head_params
            + self.layers * self.experts_per_tok * self.expert_params
        )

    @property
    def resident_bytes(self) -> float:
        """Bytes of weights resident in memory (experts at their own precision)."""
        experts = self.layers * self.num_experts * self.expert_params
        return (self.resident_params - experts) * self.weight_bytes + (
            experts * self.expert_weight_bytes
        )

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads stored per GPU: split over ``tp``, replicated when ``tp > kv_heads``."""
        return max(1, math.ceil(self.kv_heads / tp))

    def kv_bytes_per_token(self, tp: int = 1) -> float:
        """KV-cache bytes one token occupies on one GPU (K and V, every layer)."""
        return 2.0 * self.layers * self.kv_heads_per_gpu(tp) * self.head_dim * self.kv_bytes


@dataclass(frozen=True)
class ModelSpec:
    """A catalog LLM (``models/verifiers``): its config numbers and derived counts."""

    name: str
    hf_repo: str
    source: str
    path: Path
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    weight_bytes: float = 2.0
    expert_weight_bytes: float = 2.0
    kv_cache_bytes: float = 2.0
    sliding_window: int = 0
    sliding_window_layers: int = 0
    card_total: float | None = None
    card_active: float | None = None
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_params(self) -> float:
        """Attention weights of one layer, :math:`h(n_q d) + 2h(n_{kv} d) + (n_q d) h`."""
        h, q, kv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        return float(2 * h * q * self.head_dim + 2 * h * kv * self.head_dim)

    @property
    def expert_params(self) -> float:
        """One expert of one layer, :math:`3 h I_e` (0 for dense models)."""
        return float(3 * self.hidden_size * self.moe_intermediate_size) if self.is_moe else 0.0

    @property
    def mlp_params(self) -> float:
        """Non-expert MLP weights of one layer: the dense SwiGLU, or the MoE router."""
        if self.is_moe:
            return float(self.hidden_size * self.num_experts)
        return float(3 * self.hidden_size * self.intermediate_size)

    @property
    def embedding_params(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    @property
    def total_parameters(self) -> float:
        """All parameters (embedding and LM head counted once each unless tied)."""
        layer = self.attention_params + self.mlp_params + self.num_experts * self.expert_params
        heads = self.embedding_params * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + heads

    @property
    def active_parameters(self) -> float:
        """Parameters one token uses (m experts; embedding + LM head counted once)."""
        layer = (
            self.attention_params
            + self.mlp_params
            + self.num_experts_per_tok * (self.expert_params)
        )
        return self.num_hidden_layers * layer + self.embedding_params

    def geometry(self) -> Geometry:
        """The cost-model view of this network used as a verifier or a vanilla drafter."""
        layer = self.attention_params + self.mlp_params
        lm_head = self.embedding_params
        return Geometry(
            layers=self.num_hidden_layers,
            hidden=self.hidden_size,
            q_heads=self.num_attention_heads,
            kv_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            streamed_params=self.num_hidden_layers * layer + lm_head,
            expert_params=self.expert_params,
            num_experts=self.num_experts,
            experts_per_tok=self.num_experts_per_tok,
            lm_head_params=lm_head,
            resident_params=self.total_parameters,
            weight_bytes=self.weight_bytes,
            expert_weight_bytes=self.expert_weight_bytes,
            kv_bytes=self.kv_cache_bytes,
            sliding_window=self.sliding_window,
            sliding_layers=self.sliding_window_layers,
        )


@dataclass(frozen=True)
class DrafterSpec:
    r"""A catalog drafter (``models/drafters``).

    ``type = "eagle3"``: one decoder layer on the verifier's hidden size whose Q/K/V
    projections read a :math:`2h` input, an fc layer :math:`3h \to h` and an LM head over
    ``draft_vocab_size``; the embedding is the verifier's (not resident twice).
    ``type = "vanilla"``: a full catalog model.
    """

    name: str
    type: str
    source: str
    path: Path
    verifier: str | None
    model: ModelSpec | None
    base: ModelSpec
    draft_vocab_size: int = 0
    intermediate_size: int = 0
    num_hidden_layers: int = 1

    @property
    def parameters(self) -> float:
        return self.geometry().resident_params

    def geometry(self) -> Geometry:
        if self.type == "vanilla":
            assert self.model is not None
            return self.model.geometry()
        b = self.base
        h, q, kv, d = b.hidden_size, b.num_attention_heads, b.num_key_value_heads, b.head_dim
        attn = 2 * h * (q * d + 2 * kv * d) + q * d * h  # Q/K/V read [embedding; features]
        mlp = 3 * h * self.intermediate_size
        fc = 3 * h * h
        layer = self.num_hidden_layers * (attn + mlp) + fc
        lm_head = float(h * self.draft_vocab_size)
        return Geometry(
            layers=self.num_hidden_layers,
            hidden=h,
            q_heads=q,
            kv_heads=kv,
            head_dim=d,
            streamed_params=layer + lm_head,
            expert_params=0.0,
            num_experts=0,
            experts_per_tok=0,
            lm_head_params=lm_head,
            resident_params=layer + lm_head,
            weight_bytes=b.weight_bytes,
            expert_weight_bytes=b.weight_bytes,
            kv_bytes=b.kv_cache_bytes,
        )


@dataclass(frozen=True)
class HardwareSpec:
    """A catalog accelerator (``models/hardware``), one GPU."""

    name: str
    source: str
    path: Path
    memory_gib: float
    hbm_bandwidth: float
    bf16_flops: float
    nvlink_bandwidth: float
    achievable_bandwidth_fraction: float
    achievable_compute_fraction: float
    allreduce_latency_s: float

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2.0**30

    @property
    def bandwidth(self) -> float:
        """Sustained HBM bandwidth (B/s) = peak x achievable fraction (an assumption)."""
        return self.hbm_bandwidth * self.achievable_bandwidth_fraction

    @property
    def compute(self) -> float:
        """Sustained dense BF16 FLOP/s = peak x achievable fraction (an assumption)."""
        return self.bf16_flops * self.achievable_compute_fraction


@cache
def load_model(name: str) -> ModelSpec:
    """Load a ``models/verifiers`` entry by name or alias (case-insensitive).

    Raises
    ------
    ValueError
        Unknown name (the message lists the catalog).
    """
    raw, path = _load("verifiers", name)
    arch = raw["architecture"]
    moe = raw.get("moe", {})
    prec = raw.get("precision", {})
    card = raw.get("card", {})
    return ModelSpec(
        name=raw["name"],
        hf_repo=raw.get("hf_repo", ""),
        source=raw.get("source", ""),
        path=path,
        num_hidden_layers=int(arch["num_hidden_layers"]),
        hidden_size=int(arch["hidden_size"]),
        num_attention_heads=int(arch["num_attention_heads"]),
        num_key_value_heads=int(arch["num_key_value_heads"]),
        head_dim=int(arch["head_dim"]),
        intermediate_size=int(arch["intermediate_size"]),
        vocab_size=int(arch["vocab_size"]),
        tie_word_embeddings=bool(arch.get("tie_word_embeddings", False)),
        num_experts=int(moe.get("num_experts", 0)),
        num_experts_per_tok=int(moe.get("num_experts_per_tok", 0)),
        moe_intermediate_size=int(moe.get("moe_intermediate_size", 0)),
        weight_bytes=float(prec.get("weight_bytes", 2.0)),
        expert_weight_bytes=float(prec.get("expert_weight_bytes", prec.get("weight_bytes", 2.0))),
        kv_cache_bytes=float(prec.get("kv_cache_bytes", 2.0)),
        sliding_window=int(arch.get("sliding_window", 0)),
        sliding_window_layers=int(arch.get("sliding_window_layers", 0)),
        card_total=card.get("total_parameters"),
        card_active=card.get("active_parameters"),
    )


@cache
def load_drafter(name: str) -> DrafterSpec:
    """Load a ``models/drafters`` entry by name (``EAGLE3-Qwen3-8B``, ``Qwen3-1.7B``, ...)."""
    raw, path = _load("drafters", name)
    kind = raw.get("type", "")
    if kind == "vanilla":
        model = load_model(raw["model"])
        return DrafterSpec(
            name=raw["name"],
            type="vanilla",
            source=raw.get("source", ""),
            path=path,
            verifier=None,
            model=model,
            base=model,
        )
    if kind == "eagle3":
        arch = raw["architecture"]
        base = load_model(raw["verifier"])
        return DrafterSpec(
            name=raw["name"],
            type="eagle3",
            source=raw.get("source", ""),
            path=path,
            verifier=base.name,
            model=None,
            base=base,
            draft_vocab_size=int(arch["draft_vocab_size"]),
            intermediate_size=int(arch["intermediate_size"]),
            num_hidden_layers=int(arch.get("num_hidden_layers", 1)),
        )
    raise ValueError(f"{path}: drafter type must be 'eagle3' or 'vanilla', got {kind!r}")


@cache
def load_hardware(name: str) -> HardwareSpec:
    """Load a ``models/hardware`` entry by name or alias (``H100``, ``A100-SXM-80GB``, ...)."""
    raw, path = _load("hardware", name)
    ass = raw.get("assumptions", {})
    return HardwareSpec(
        name=raw["name"],
        source=raw.get("source", ""),
        path=path,
        memory_gib=float(raw["memory_gib"]),
        hbm_bandwidth=float(raw["hbm_bandwidth"]),
        bf16_flops=float(raw["bf16_flops"]),
        nvlink_bandwidth=float(raw["nvlink_bandwidth"]),
        achievable_bandwidth_fraction=float(ass.get("achievable_bandwidth_fraction", 0.8)),
        achievable_compute_fraction=float(ass.get("achievable_compute_fraction", 0.6)),
        allreduce_latency_s=float(ass.get("allreduce_latency_s", 8e-6)),
    )


def default_drafter(verifier: str) -> str:
    """The EAGLE-3 head of ``verifier`` (``EAGLE3-<name>``)."""
    return f"EAGLE3-{load_model(verifier).name}"
