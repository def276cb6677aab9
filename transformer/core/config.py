"""Model configuration: one dataclass that says everything about a Transformer's shape.

The field names follow the paper ("Attention Is All You Need", Vaswani et al. 2017):
``d_model``, ``n_heads`` (h), ``d_ff``, N encoder and decoder layers, ``dropout`` (P_drop).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from .special import PAD_ID
from .util import is_int

Architecture = Literal["encoder-decoder", "encoder-only", "decoder-only"]
Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
NormPlacement = Literal["post", "pre", "output"]
PositionalKind = Literal["sinusoidal", "learned", "rotary"]
SinusoidalLayout = Literal["interleaved", "halves"]
NormKind = Literal["layer", "rms"]
FeedForwardKind = Literal["standard", "gated"]
QKNorm = Literal["none", "head", "projection"]

ARCHITECTURES: tuple[str, ...] = ("encoder-decoder", "encoder-only", "decoder-only")
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_tanh", "silu")
NORM_PLACEMENTS: tuple[str, ...] = ("post", "pre", "output")
POSITIONAL_KINDS: tuple[str, ...] = ("sinusoidal", "learned", "rotary")
SINUSOIDAL_LAYOUTS: tuple[str, ...] = ("interleaved", "halves")
NORM_KINDS: tuple[str, ...] = ("layer", "rms")
FEED_FORWARD_KINDS: tuple[str, ...] = ("standard", "gated")
QK_NORMS: tuple[str, ...] = ("none", "head", "projection")
LAYER_TYPES: tuple[str, ...] = ("full_attention", "sliding_attention")
ROPE_SCALINGS: tuple[str, ...] = ("linear", "dynamic", "llama3", "yarn", "longrope")
_ORIGINAL = "original_max_position_embeddings"
_ROPE_SCALING_KEYS: dict[str, tuple[str, ...]] = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", _ORIGINAL),
    "yarn": ("factor", _ORIGINAL),
    "longrope": ("short_factor", _ORIGINAL),
}


class ConfigError(ValueError):
    """A configuration that cannot build a model; the message says what to change."""


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Transformer.

    ``norm`` is ``"post"`` for the paper's ``LayerNorm(x + Sublayer(x))`` and ``"pre"`` for
    ``x + Sublayer(LayerNorm(x))`` (which adds a final LayerNorm to each stack).
    ``tie_embeddings`` ties the generator to the target embedding (paper section 3.4) and, in
    an encoder-decoder, the source embedding too; that needs one shared vocabulary.

    The options after ``layer_norm_eps`` let pretrained families run on the same parts (see
    :mod:`transformer.pretrained`); their defaults are the paper's choices:

    - ``activation``: ``"relu"`` (paper), ``"gelu"`` (exact, erf: BERT), ``"gelu_tanh"`` (the
      tanh approximation: GPT-2) or ``"silu"`` (a.k.a. swish: Marian).
    - ``sinusoidal_layout``: ``"interleaved"`` puts sin and cos of one frequency side by side
      (paper: dims 2i, 2i+1); ``"halves"`` puts every sin first, then every cos (Marian).
    - ``scale_embeddings``: multiply token embeddings by √d_model (paper, Marian) or not
      (BERT, GPT-2).
    - ``embedding_norm``: a LayerNorm over token + position (+ type) embeddings (BERT).
    - ``n_token_types``: size of the token-type (segment) embedding added to the encoder's
      input, 0 for none (BERT uses 2: sentence A and B).
    - ``generator_bias``: the output projection has a bias (paper, Marian's
      ``final_logits_bias``) or not (GPT-2's and BERT's tied read-out).
    - ``mask_target_padding``: decoder self-attention ignores target keys equal to ``pad_id``
      (paper); ``False`` where the pad id is real input: Marian's decoder starts from the pad
      token and GPT-2 has no pad token of its own.
    - ``prompt_bos``: a decoder-only model's prompt begins with the tokenizer's ``[BOS]``
      (our models and GPT-2, as they were trained), or not: a GGUF file says so itself
      (``tokenizer.ggml.add_bos_token``; SmolLM2's says no).
    - ``decoder_start_id`` / ``eos_id``: the first decoder input and the end token of
      generation; ``None`` means the tokenizer's ``[BOS]`` / ``[EOS]`` (our own models).

    The fields after ``eos_id`` describe the modern (Llama-family) block; their defaults are
    again the paper's:

    - ``positional="rotary"``: no positional vector is added to the embeddings; q and k are
      rotated after their projections (RoPE, "rotate half" pairing of dimension i with
      i + d_head/2, as Hugging Face Llama), with frequencies ``rope_base^(-2i/d_head)``.
      ``rope_base`` is only read for rotary positions (10000 in the RoPE paper).
    - ``norm_kind``: ``"layer"`` (LayerNorm: subtract the mean, divide by the standard
      deviation, scale and shift) or ``"rms"`` (RMSNorm: ``x / sqrt(mean(x²) + eps) · w``, no
      mean and no bias). Both use ``layer_norm_eps``.
    - ``feed_forward_kind``: ``"standard"`` (``W_2 act(W_1 x)``, paper) or ``"gated"``
      (``W_down(act(W_gate x) ⊙ W_up x)``; SwiGLU with ``activation="silu"``).
    - ``n_kv_heads``: key/value heads for grouped-query attention (``None`` = ``n_heads``,
      the paper's multi-head attention; 1 = multi-query). It must divide ``n_heads``: query
      head h reads key/value head ``h // (n_heads // n_kv_heads)``.
    - ``attention_qkv_bias`` / ``attention_output_bias`` / ``mlp_bias``: whether the q, k, v
      projections, the attention output projection and the feed-forward's linear layers have
      a bias (Llama: none; Qwen2: q, k and v only).

    The fields after ``mlp_bias`` are the later families' differences, one field each, their
    defaults again the paper's (or Llama's, where the paper has no such thing):

    - ``head_dim``: the width of one head when it is not ``d_model / n_heads`` (Qwen3, Gemma:
      W_Q maps d_model to ``n_heads · head_dim`` and W_O back); ``None``: d_model / n_heads.
    - ``rotary_fraction``: the share of each head's dimensions that rotary positions turn (the
      first ``rotary_fraction · d_head``, paired rotate-half among themselves; the rest pass
      unturned): 1 (Llama), 0.25 (Pythia's ``rotary_pct``), 0.75 (Phi-4-mini).
    - ``rope_scaling``: how the rotary frequencies are stretched for contexts longer than
      training's, as ``config.json``'s ``rope_scaling`` dict (``rope_type`` one of
      ``linear``, ``dynamic``, ``llama3``, ``yarn``, ``longrope``, and its numbers), kept as
      sorted ``(key, value)`` pairs; ``None``: plain RoPE.
    - ``local_rope_base``: the rotary base of the sliding-window layers, which then turn
      without ``rope_scaling`` (Gemma 3: 10,000 locally, 1,000,000 globally); ``None``: every
      layer uses ``rope_base``.
    - ``qk_norm``: an RMSNorm on the queries and keys before their rotation: ``"head"`` (each
      head's d_head values alone: Qwen3, Gemma 3), ``"projection"`` (the whole projection at
      once: OLMo 2) or ``"none"``.
    - ``sliding_window``: the number of positions a sliding-window layer's query reads (itself
      and the ``sliding_window − 1`` before it); its cache keeps no more. ``layer_types`` says
      which layers slide (``"sliding_attention"``) and which read everything
      (``"full_attention"``), one entry per decoder layer; ``None`` with a window: every layer
      slides (Mistral).
    - ``attention_softcap`` / ``final_logit_softcap``: scores (after scaling, before the mask)
      and logits squashed to ``cap · tanh(x / cap)`` (Gemma 2); ``None``: not capped.
    - ``norm_offset``: the norms multiply by ``norm_offset + w`` (Gemma stores ``w`` around 0
      and adds 1); 0 for everyone else.
    - ``norm="output"``: a norm on each sub-layer's output before it joins the stream,
      ``x + Norm(Sublayer(x))``, none on its input (OLMo 2); ``post_sublayer_norm`` adds that
      output norm to the pre-norm (``x + Norm₂(Sublayer(Norm₁(x)))``: Gemma 2 and 3).
    - ``parallel_residual``: attention and feed-forward both read the layer's input, ``x +
      Attn(LN₁(x)) + FF(LN₂(x))`` (GPT-NeoX, Pythia), instead of one after the other.
    - ``score_scale_dim``: the d_k of the score scale ``1/√d_k`` when it is not d_head (Gemma's
      ``query_pre_attn_scalar``).
    """

    src_vocab_size: int = 1000
    tgt_vocab_size: int = 1000
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 256
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    dropout: float = 0.1
    activation: Activation = "relu"
    norm: NormPlacement = "post"
    positional: PositionalKind = "sinusoidal"
    max_len: int = 512
    pad_id: int = PAD_ID
    tie_embeddings: bool = False
    architecture: Architecture = "encoder-decoder"
    layer_norm_eps: float = 1e-5
    sinusoidal_layout: SinusoidalLayout = "interleaved"
    scale_embeddings: bool = True
    embedding_norm: bool = False
    n_token_types: int = 0
    generator_bias: bool = True
    mask_target_padding: bool = True
    prompt_bos: bool = True
    decoder_start_id: int | None = None
    eos_id: int | None = None
    norm_kind: NormKind = "layer"
    rope_base: float = 10000.0
    feed_forward_kind: FeedForwardKind = "standard"
    n_kv_heads: int | None = None
    attention_qkv_bias: bool = True
    attention_output_bias: bool = True
    mlp_bias: bool = True
    head_dim: int | None = None
    rotary_fraction: float = 1.0
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    local_rope_base: float | None = None
    qk_norm: QKNorm = "none"
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    attention_softcap: float | None = None
    final_logit_softcap: float | None = None
    norm_offset: float = 0.0
    post_sublayer_norm: bool = False
    parallel_residual: bool = False
    score_scale_dim: float | None = None

    def __post_init__(self) -> None:
        # JSON gives lists and objects where the frozen dataclass keeps tuples (hashable).
        scaling = self.rope_scaling
        if isinstance(scaling, dict | list | tuple):
            pairs = scaling.items() if isinstance(scaling, dict) else scaling
            frozen = tuple(
                sorted((key, tuple(v) if isinstance(v, list) else v) for key, v in pairs)
            )
            object.__setattr__(self, "rope_scaling", frozen)
        if isinstance(self.layer_types, list):
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
        self.validate()

    @property
    def d_head(self) -> int:
        """Width of one attention head: d_k = d_v = d_model / h (or ``head_dim`` when given)."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def rotary_dims(self) -> int:
        """How many of a head's dimensions rotary positions turn (an even number)."""
        return int(self.d_head * self.rotary_fraction) // 2 * 2

    @property
    def rope_scaling_dict(self) -> dict[str, Any] | None:
        """``rope_scaling`` as a dict (``None`` for plain RoPE)."""
        return None if self.rope_scaling is None else dict(self.rope_scaling)

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of decoder layer ``layer`` (``None``: it reads every position)."""
        if self.sliding_window is None:
            return None
        if self.layer_types is None or self.layer_types[layer] == "sliding_attention":
            return self.sliding_window
        return None

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads: ``n_kv_heads``, or ``n_heads`` when that is ``None``."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def is_modern(self) -> bool:
        """Whether the model has any of the modern block's four changes from the paper (RMSNorm,
        rotary positions, a gated feed-forward, shared key/value heads): the views about the
        modern block offer themselves by this."""
        return (
            self.norm_kind == "rms"
            or self.positional == "rotary"
            or self.feed_forward_kind == "gated"
            or self.kv_heads != self.n_heads
        )

    @property
    def kv_group_size(self) -> int:
        """Query heads that share one key/value head (1 for the paper's multi-head attention)."""
        return self.n_heads // self.kv_heads

    @property
    def has_encoder(self) -> bool:
        """True for encoder-decoder and encoder-only models."""
        return self.architecture in ("encoder-decoder", "encoder-only")

    @property
    def has_decoder(self) -> bool:
        """True for encoder-decoder and decoder-only models."""
        return self.architecture in ("encoder-decoder", "decoder-only")

    @property
    def output_vocab_size(self) -> int:
        """Vocabulary the generator predicts over (the source one for encoder-only models)."""
        return self.src_vocab_size if self.architecture == "encoder-only" else self.tgt_vocab_size

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the field to change if the combination is invalid."""
        choices = {
            "architecture": ARCHITECTURES,
            "activation": ACTIVATIONS,
            "norm": NORM_PLACEMENTS,
            "positional": POSITIONAL_KINDS,
            "sinusoidal_layout": SINUSOIDAL_LAYOUTS,
            "norm_kind": NORM_KINDS,
            "feed_forward_kind": FEED_FORWARD_KINDS,
            "qk_norm": QK_NORMS,
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"{name}={value!r} is not one of {', '.join(allowed)}.")
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}.")
        if self.head_dim is None and self.d_model % self.n_heads != 0:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: choose "
                f"n_heads from {_divisors(self.d_model)} or a d_model that is a multiple of "
                f"{self.n_heads}."
            )
        self._validate_pairs()
        for name in ("n_encoder_layers", "n_decoder_layers"):
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                raise ConfigError(f"{name} must be an integer ≥ 0, got {value!r}.")
        if self.has_encoder and self.n_encoder_layers == 0:
            raise ConfigError(f"a {self.architecture} model needs n_encoder_layers ≥ 1.")
        if self.has_decoder and self.n_decoder_layers == 0:
            raise ConfigError(f"a {self.architecture} model needs n_decoder_layers ≥ 1.")
        self._validate_modern()
        self._validate_families()
        for name in (
            "scale_embeddings",
            "embedding_norm",
            "generator_bias",
            "mask_target_padding",
            "attention_qkv_bias",
            "attention_output_bias",
            "mlp_bias",
            "post_sublayer_norm",
            "parallel_residual",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}.")
        if not _is_int(self.n_token_types) or self.n_token_types < 0:
            raise ConfigError(f"n_token_types must be an integer ≥ 0, got {self.n_token_types!r}.")
        if self.n_token_types and not self.has_encoder:
            raise ConfigError(
                "token-type embeddings are added to the encoder's input: a decoder-only model "
                "needs n_token_types=0."
            )
        for name in ("decoder_start_id", "eos_id"):
            value = getattr(self, name)
            if value is not None and not (_is_int(value) and 0 <= value < self.output_vocab_size):
                raise ConfigError(
                    f"{name}={value!r} must be None or an id in 0..{self.output_vocab_size - 1}."
                )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}.")
        if not self.layer_norm_eps > 0:
            raise ConfigError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}.")
        for name in ("src_vocab_size", "tgt_vocab_size"):
            if not 0 <= self.pad_id < getattr(self, name):
                raise ConfigError(f"pad_id={self.pad_id} is outside {name}={getattr(self, name)}.")
        if (
            self.tie_embeddings
            and self.architecture == "encoder-decoder"
            and self.src_vocab_size != self.tgt_vocab_size
        ):
            raise ConfigError(
                "tie_embeddings shares one embedding between source, target and generator, so "
                f"src_vocab_size ({self.src_vocab_size}) must equal tgt_vocab_size "
                f"({self.tgt_vocab_size}); use one shared vocabulary or set tie_embeddings=False."
            )

    def _validate_modern(self) -> None:
        """The Llama-family fields: grouped-query heads and rotary positions."""
        if self.n_kv_heads is not None:
            if not _is_int(self.n_kv_heads) or self.n_kv_heads < 1:
                raise ConfigError(
                    f"n_kv_heads must be None (one key/value head per query head) or a positive "
                    f"integer, got {self.n_kv_heads!r}."
                )
            if self.n_heads % self.n_kv_heads != 0:
                choices = [d for d in range(1, self.n_heads + 1) if self.n_heads % d == 0]
                raise ConfigError(
                    f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}: each "
                    f"key/value head serves a whole group of query heads; choose n_kv_heads "
                    f"from {choices}."
                )
        if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, int | float):
            raise ConfigError(f"rope_base must be a number, got {self.rope_base!r}.")
        if not math.isfinite(self.rope_base) or self.rope_base <= 1:
            raise ConfigError(
                f"rope_base must be a finite number > 1 (10000 in the RoPE paper), got "
                f"{self.rope_base!r}."
            )

    def _validate_families(self) -> None:
        """The later families' fields (see the class docstring)."""
        if self.head_dim is not None and (not _is_int(self.head_dim) or self.head_dim < 1):
            raise ConfigError(
                f"head_dim must be None or a positive integer, got {self.head_dim!r}."
            )
        if not _is_number(self.rotary_fraction) or not 0 < self.rotary_fraction <= 1:
            raise ConfigError(f"rotary_fraction must be in (0, 1], got {self.rotary_fraction!r}.")
        if self.positional == "rotary" and self.rotary_dims < 2:
            raise ConfigError(
                f"rotary_fraction={self.rotary_fraction} of d_head={self.d_head} turns no pair "
                "of dimensions: raise it."
            )
        scaling = self.rope_scaling_dict
        if scaling is not None:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind not in ROPE_SCALINGS:
                raise ConfigError(
                    f"rope_scaling's rope_type={kind!r} is not one of {', '.join(ROPE_SCALINGS)}."
                )
            missing = [key for key in _ROPE_SCALING_KEYS[kind] if key not in scaling]
            if missing:
                raise ConfigError(f"rope_scaling of type {kind!r} needs {', '.join(missing)}.")
        for name in ("local_rope_base", "attention_softcap", "final_logit_softcap"):
            value = getattr(self, name)
            if value is not None and (not _is_number(value) or not value > 0):
                raise ConfigError(f"{name} must be None or a number > 0, got {value!r}.")
        if self.score_scale_dim is not None and (
            not _is_number(self.score_scale_dim) or not self.score_scale_dim > 0
        ):
            raise ConfigError(
                f"score_scale_dim must be None or a number > 0, got {self.score_scale_dim!r}."
            )
        if not _is_number(self.norm_offset):
            raise ConfigError(f"norm_offset must be a number, got {self.norm_offset!r}.")
        if self.sliding_window is not None and (
            not _is_int(self.sliding_window) or self.sliding_window < 1
        ):
            raise ConfigError(
                f"sliding_window must be None or a positive integer, got {self.sliding_window!r}."
            )
        if self.layer_types is not None:
            if len(self.layer_types) != self.n_decoder_layers:
                raise ConfigError(
                    f"layer_types has {len(self.layer_types)} entries for "
                    f"{self.n_decoder_layers} decoder layers: give one per layer."
                )
            unknown = sorted(set(self.layer_types) - set(LAYER_TYPES))
            if unknown:
                raise ConfigError(
                    f"layer_types holds {unknown}; each entry is one of {', '.join(LAYER_TYPES)}."
                )
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ConfigError("layer_types has sliding layers: give sliding_window.")
        if self.post_sublayer_norm and self.norm != "pre":
            raise ConfigError(
                "post_sublayer_norm adds a norm after each sub-layer to the pre-norm: it needs "
                "norm='pre' (norm='output' has the output norm alone)."
            )

    def _validate_pairs(self) -> None:
        """The positions work on pairs of dimensions, so the width they pair must be even."""
        paired = {  # positional kind → (what it pairs, that width, the width as given)
            "sinusoidal": (
                "sinusoidal positional encoding pairs sin and cos, so d_model",
                self.d_model,
                f"{self.d_model}",
            ),
            "rotary": (
                "rotary positions rotate pairs of dimensions, so d_head"
                + (" (head_dim)" if self.head_dim is not None else " = d_model / n_heads"),
                self.d_head,
                f"{self.d_head}"
                if self.head_dim is not None
                else f"{self.d_model} / {self.n_heads} = {self.d_head}",
            ),
        }
        if self.positional in paired:
            what, width, given = paired[self.positional]
            if width % 2 != 0:
                raise ConfigError(f"{what} must be even (got {given}).")

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)

    def to_json(self) -> str:
        """The configuration as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build from a dict, rejecting unknown keys by name (a typo must not pass silently)."""
        if not isinstance(data, dict):
            raise ConfigError(f"a model configuration is a JSON object, got {type(data).__name__}.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {unknown}; known keys: {sorted(known)}.")
        try:
            return cls(**data)
        except TypeError as error:  # e.g. a list where a number belongs
            raise ConfigError(f"invalid configuration values: {error}") from error

    @classmethod
    def from_json(cls, text: str) -> ModelConfig:
        """Parse JSON text; :class:`ConfigError` names what is wrong."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"configuration is not valid JSON: {error}") from error
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write the configuration as JSON to ``path``."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> ModelConfig:
        """Read a JSON configuration; errors name the file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot read configuration {path}: {error.strerror}") from error
        try:
            return cls.from_json(text)
        except ConfigError as error:
            raise ConfigError(f"{Path(path).name}: {error}") from error


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0 and d <= 64]


def base_config() -> ModelConfig:
    """The paper's base model (Table 3): N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1.

    WMT 2014 English-German used a shared source-target vocabulary of about 37000 BPE tokens,
    with the two embeddings and the pre-softmax projection tied (section 3.4). Built with
    :class:`transformer.core.model.Transformer` this has 63,119,496 trainable parameters (63.1M:
    18.9M in the shared embedding, 18.9M in the encoder, 25.2M in the decoder, 37,000 in the
    generator's bias) against the paper's reported 65M. The paper does not say what it
    counted; the usual reading is rounding plus a slightly different vocabulary.
    """
    return ModelConfig(
        src_vocab_size=37000,
        tgt_vocab_size=37000,
        d_model=512,
        n_heads=8,
        d_ff=2048,
        n_encoder_layers=6,
        n_decoder_layers=6,
        dropout=0.1,
        activation="relu",
        norm="post",
        positional="sinusoidal",
        max_len=512,
        pad_id=PAD_ID,
        tie_embeddings=True,
        architecture="encoder-decoder",
    )
