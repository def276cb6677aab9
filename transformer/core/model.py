"""The Transformer: embeddings, encoder and decoder stacks, the generator (paper section 3).

Encoder-decoder, encoder-only and decoder-only models are built from the same parts
(:mod:`transformer.core.stacks`); a decoder layer has cross-attention only when there is an encoder
to attend to. Each forward takes one :class:`~transformer.core.run.Call` (its operations and
what it keeps) and makes from it one :class:`~transformer.core.run.Run` that reaches every
stack, layer and attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch
from torch import Tensor, nn

from .cache import KeyValueCache
from .config import ModelConfig
from .embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from .layers import Dropout, LayerNorm
from .masks import causal_mask, combine_masks, padding_mask
from .modern import soft_cap
from .operations import Operations
from .run import LOGITS, Call, Run
from .stacks import (
    Decoder,
    DecoderCache,
    DecoderLayer,
    Encoded,
    Encoder,
    EncoderLayer,
    LayerCache,
)
from .trace import LayerTrace, StackInput, Trace

__all__ = [
    "Decoded",
    "DecoderCache",
    "DecoderLayer",
    "EmbeddingParts",
    "Encoded",
    "EncoderLayer",
    "Generator",
    "LayerCache",
    "Transformer",
    "count_parameters",
]


def _check_shape(tokens: Tensor) -> None:
    """Raise ``ValueError`` unless ``tokens`` is ``(B, T)``."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (batch, length), got shape {tuple(tokens.shape)}")


def _check_token_ids(tokens: Tensor, vocab: int) -> None:
    """Raise ``ValueError`` naming the first id of ``(B, T)`` ``tokens`` outside ``0..vocab-1``
    and where it is. One device sync when every id is valid."""
    bad = (tokens < 0) | (tokens >= vocab)  # (B, T)
    if tokens.numel() and bool(bad.any()):
        row, position = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"token id {int(tokens[row, position])} (row {row}, position {position}) is outside "
            f"the vocabulary: ids must lie in 0..{vocab - 1}"
        )


class Generator(nn.Module):
    """The final linear projection to vocabulary logits (softmax is left to the loss/sampler)."""

    def __init__(
        self, d_model: int, vocab_size: int, bias: bool = True, softcap: float | None = None
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size, bias=bias)
        self.softcap = softcap  # Gemma 2: logits squashed to softcap · tanh(logits / softcap)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, d_model)`` → ``(B, T, vocab_size)`` logits."""
        return soft_cap(self.proj(x), self.softcap)


class _LaterProjection:
    """A generator applied after its pass, to the ``(B, t, d_model)`` outputs a trace kept
    (its logits, computed when read): without gradients, and only while the generator's
    weights are those the pass ran with (otherwise an error, not another model's logits)."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator
        self.versions = [p._version for p in generator.parameters()]

    def __call__(self, hidden: Tensor) -> Tensor:
        if [p._version for p in self.generator.parameters()] != self.versions:
            raise RuntimeError(
                "the model's output projection changed after this pass was captured: its "
                "logits are computed when read, so capture the pass again"
            )
        with torch.no_grad():
            return self.generator(hidden)


@dataclass
class Decoded:
    """The decoder's output: ``hidden`` ``(B, Tq, d_model)``, ``logits`` ``(B, Tq, V)`` (``(B, 1,
    V)`` when decoded ``last_only``), and, when captured, the layer traces, the input record and
    the ``(Tq, Tk)`` causal mask."""

    hidden: Tensor
    logits: Tensor
    input: StackInput | None = None
    layers: list[LayerTrace] = field(default_factory=list)
    causal: Tensor | None = None


@dataclass(frozen=True)
class EmbeddingParts:
    """What one stack's input is made of: the token embedding, the positional encoding, the
    LayerNorm over their sum (where the configuration has one; no positional module with
    rotary positions, which enter inside attention) and, for the encoder of a model
    with token types (BERT), the ``(B, T, d_model)`` token-type vectors to add."""

    embedding: TokenEmbedding
    positional: nn.Module | None
    norm: LayerNorm | None = None
    token_types: Tensor | None = None


class Transformer(nn.Module):
    """Encoder-decoder, encoder-only or decoder-only Transformer built from one :class:`ModelConfig`.

    Call it with ``src`` (encoder), ``tgt`` (decoder) or both, as the architecture needs:
    ``model(src, tgt)`` returns ``(B, Tt, V)`` logits; ``model(src, tgt, call=TRACE)`` returns a
    :class:`~transformer.core.trace.Trace` holding the logits and every intermediate. Each forward
    takes one per-call object, a :class:`~transformer.core.run.Call`: the operations the pass
    runs (a what-if's) and what it keeps.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model

        def positional() -> nn.Module | None:
            if config.positional == "rotary":
                return None  # positions rotate q and k inside attention (transformer.core.rotary)
            if config.positional == "sinusoidal":
                return SinusoidalPositionalEncoding(
                    d, config.max_len, layout=config.sinusoidal_layout
                )
            return LearnedPositionalEmbedding(d, config.max_len)

        def embedding_norm() -> LayerNorm | None:
            return LayerNorm(d, config.layer_norm_eps) if config.embedding_norm else None

        scale = config.scale_embeddings
        self.embedding_dropout = Dropout(config.dropout)
        self.src_embedding: TokenEmbedding | None = None
        self.tgt_embedding: TokenEmbedding | None = None
        # Token-type (segment) embeddings, added to the encoder's input (BERT).
        self.token_type_embedding: nn.Embedding | None = None
        if config.has_encoder:
            self.src_embedding = TokenEmbedding(config.src_vocab_size, d, config.pad_id, scale)
            self.src_positional = positional()
            if config.n_token_types:
                self.token_type_embedding = nn.Embedding(config.n_token_types, d)
            self.src_embedding_norm = embedding_norm()
            self.encoder = Encoder(config)
        if config.has_decoder:
            self.tgt_embedding = TokenEmbedding(config.tgt_vocab_size, d, config.pad_id, scale)
            self.tgt_positional = positional()
            self.tgt_embedding_norm = embedding_norm()
            self.decoder = Decoder(config)
        self.generator = Generator(
            d, config.output_vocab_size, config.generator_bias, config.final_logit_softcap
        )
        self._init_weights()
        if config.tie_embeddings:
            # Section 3.4: one matrix for both embeddings and the pre-softmax projection.
            if self.src_embedding is not None and self.tgt_embedding is not None:
                self.tgt_embedding.lookup.weight = self.src_embedding.lookup.weight
            output_embedding = self.tgt_embedding or self.src_embedding
            assert output_embedding is not None  # every architecture has one stack at least
            self.generator.proj.weight = output_embedding.lookup.weight

    def _init_weights(self) -> None:
        """Xavier-uniform for every matrix, zeros for biases, zero padding embeddings."""
        for name, param in self.named_parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)
            elif name.endswith(".bias") and "norm" not in name:
                nn.init.zeros_(param)
        with torch.no_grad():
            for embedding in (self.src_embedding, self.tgt_embedding):
                if embedding is not None:
                    embedding.lookup.weight[self.config.pad_id].zero_()

    input_device: torch.device | None = None
    """Where inputs go when ``accelerate`` spread the model over several devices (some of its
    weights then on the meta device, read in per layer); ``None`` otherwise."""

    @property
    def device(self) -> torch.device:
        """The device the weights are on: where inputs go (for a model spread over several
        devices, the first one, :attr:`input_device`)."""
        return self.input_device or self.generator.proj.weight.device

    # -- inputs ---------------------------------------------------------------------------

    def _source_parts(self, src: Tensor, token_types: Tensor | None) -> EmbeddingParts:
        """The encoder's embedding parts for ``(B, Ts)`` ids and their token types (all 0 when
        left out, on a model that has token types)."""
        assert self.src_embedding is not None  # called once has_encoder was checked
        if self.token_type_embedding is None:
            if token_types is not None:
                raise ValueError("this model has no token-type embeddings: leave token_types out")
            return EmbeddingParts(self.src_embedding, self.src_positional, self.src_embedding_norm)
        if token_types is None:
            token_types = torch.zeros_like(src)
        elif token_types.shape != src.shape:
            raise ValueError(
                f"token_types must have the tokens' shape {tuple(src.shape)}, got "
                f"{tuple(token_types.shape)}"
            )
        n_types = self.token_type_embedding.num_embeddings
        if token_types.numel() and (
            int(token_types.min()) < 0 or int(token_types.max()) >= n_types
        ):
            raise ValueError(f"token types must lie in 0..{n_types - 1}")
        type_vectors = self.token_type_embedding(token_types)  # (B, Ts, d_model)
        return EmbeddingParts(
            self.src_embedding, self.src_positional, self.src_embedding_norm, type_vectors
        )

    def _embed(
        self,
        tokens: Tensor,
        parts: EmbeddingParts,
        offset: int,
        real: Tensor,
        run: Run,
    ) -> tuple[Tensor, StackInput | None]:
        """``(B, T)`` ids at positions ``offset ..`` → ``(B, T, d_model)``: scaled token
        embedding + positional encoding (+ token-type embedding, then LayerNorm, where the
        configuration has them). ``real`` ``(B, T)`` bool marks the real (non-padding) tokens,
        for the trace."""
        token_vectors = parts.embedding(tokens)  # (B, T, d_model)
        if parts.positional is None:  # rotary: nothing is added, q and k are rotated instead
            x, pe = token_vectors, token_vectors.new_zeros(tokens.size(1), token_vectors.size(2))
        else:
            pe = run.ops.positions(parts.positional, tokens.size(1), offset)  # (T, d_model)
            x = token_vectors + pe
        if parts.token_types is not None:
            x = x + parts.token_types
        if parts.norm is not None:
            x = parts.norm(x, run)
        x = self.embedding_dropout(x)
        if not run.traced:
            return x, None
        return x, StackInput(
            tokens=tokens,
            token_embedding=token_vectors.detach(),
            positional=pe.detach(),
            real_tokens=real,
            position_offset=offset,
            token_type_embedding=None if parts.token_types is None else parts.token_types.detach(),
        )

    # -- the two halves -------------------------------------------------------------------

    def encode(
        self,
        src: Tensor,
        *,
        call: Call = LOGITS,
        token_types: Tensor | None = None,
    ) -> Encoded:
        """Run the encoder on ``(B, Ts)`` source ids (and ``(B, Ts)`` token types, if the
        model has token-type embeddings; all 0 when left out), as ``call`` says (its operations;
        its layer traces where it traces)."""
        return self._encode(src, call.run(), token_types)

    def _encode(self, src: Tensor, run: Run, token_types: Tensor | None) -> Encoded:
        """:meth:`encode` in one :class:`Run`."""
        if not self.config.has_encoder:
            raise ValueError(f"a {self.config.architecture} model has no encoder")
        ops = run.ops
        _check_shape(src)
        assert self.src_embedding is not None  # has_encoder
        _check_token_ids(src, self.src_embedding.lookup.num_embeddings)
        parts = self._source_parts(src, token_types)
        real = src != self.config.pad_id  # (B, Ts)
        x, record = self._embed(src, parts, 0, real, run)
        mask = padding_mask(src, self.config.pad_id) if ops.padding_mask else None
        mask = ops.attention_mask(mask, (src.size(0), 1, 1, src.size(1)), src.device)
        if mask is not None and not run.traced and bool(mask.all()):
            # Nothing is padded: the fast path gives sdpa no mask, which lets it take its
            # fastest kernel (one check here instead of a masked kernel in every layer).
            mask = None
        memory, layers = self.encoder(x, mask, run)
        return Encoded(memory=memory, mask=mask, input=record, layers=layers)

    def decode(
        self,
        tgt: Tensor,
        encoded: Encoded | None = None,
        *,
        cache: DecoderCache | None = None,
        call: Call = LOGITS,
        check_ids: bool = True,
        last_only: bool = False,
    ) -> Decoded:
        """Run the decoder on ``(B, Tq)`` target ids and return hidden states and logits.

        With a ``cache``, ``tgt`` holds only the *new* positions: their keys and values are
        appended to the cache, and the cross-attention keys/values over ``encoded.memory`` are
        computed on the first call and reused after. ``check_ids`` validates the ids of a whole
        sequence or of a cache's first call (one device sync). ``last_only``: the logits are
        ``(B, 1, V)``, the last position's only, which is all a decoding step reads (a prompt of
        T tokens then projects one row onto the vocabulary, not T: SmolLM2's 49,152 × 576
        products per row). ``call``: the operations of the pass and what it keeps (its layer
        traces where it traces).
        """
        run = call.run()
        hidden, record, layers, causal = self._run_decoder(tgt, encoded, cache, run, check_ids)
        logits = self.generator(hidden[:, -1:] if last_only else hidden)
        return Decoded(hidden=hidden, logits=logits, input=record, layers=layers, causal=causal)

    def _run_decoder(
        self,
        tgt: Tensor,
        encoded: Encoded | None,
        cache: DecoderCache | None,
        run: Run,
        check_ids: bool,
    ) -> tuple[Tensor, StackInput | None, list[LayerTrace], Tensor | None]:
        """:meth:`decode` without the generator: the ``(B, Tq, d_model)`` output and, when
        captured, the input record, the layer traces and the ``(Tq, Tk)`` causal mask."""
        config = self.config
        if not config.has_decoder:
            raise ValueError(f"a {config.architecture} model has no decoder")
        if config.has_encoder and encoded is None:
            raise ValueError("an encoder-decoder model decodes against encode(src)'s output")
        offset = cache.length if cache is not None else 0
        # Ids are checked where they enter (a sequence, a cache's prefix), not in every step of
        # a decoding loop, which feeds back the model's own choices: a device sync saved.
        real = self._real_targets(tgt, check_ids=check_ids and offset == 0)  # (B, Tq)
        assert self.tgt_embedding is not None  # has_decoder
        parts = EmbeddingParts(self.tgt_embedding, self.tgt_positional, self.tgt_embedding_norm)
        x, record = self._embed(tgt, parts, offset, real, run)
        real_keys = real if cache is None else cache.add_real_keys(real)  # (B, Tk)
        causal = causal_mask(tgt.size(1), real_keys.size(1), device=tgt.device)
        self_mask = self._self_mask(causal, real_keys, run.ops)
        hidden, layers = self.decoder(x, self_mask, encoded, cache, run)
        return hidden, record, layers, causal[0, 0] if run.traced else None

    def _real_targets(self, tgt: Tensor, check_ids: bool) -> Tensor:
        """``(B, Tq)`` bool: which of the target ids are real tokens (all, where the pad id is
        real input: Marian's start token, GPT-2's <|endoftext|>); ``ValueError`` for a shape
        that is not ``(B, Tq)`` or, with ``check_ids``, an id outside the vocabulary."""
        _check_shape(tgt)
        if check_ids:
            assert self.tgt_embedding is not None  # only a model with a decoder reads targets
            _check_token_ids(tgt, self.tgt_embedding.lookup.num_embeddings)
        if not self.config.mask_target_padding:
            return torch.ones_like(tgt, dtype=torch.bool)
        return tgt != self.config.pad_id

    def _self_mask(self, causal: Tensor, real_keys: Tensor, ops: Operations) -> Tensor | None:
        """The decoder's ``(B, 1, Tq, Tk)`` self-attention mask from the ``(1, 1, Tq, Tk)``
        causal mask and the ``(B, Tk)`` real keys (the switched-off parts left out)."""
        padding = self.config.mask_target_padding and ops.padding_mask
        mask = combine_masks(
            causal if ops.causal_mask else None,
            real_keys[:, None, None, :] if padding else None,
        )
        shape = (real_keys.size(0), 1, causal.size(2), causal.size(3))
        return ops.attention_mask(mask, shape, real_keys.device)

    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for incremental decoding with :meth:`decode`."""
        if not self.config.has_decoder:
            raise ValueError(f"a {self.config.architecture} model has no decoder to cache")
        # A sliding-window layer's cache keeps its window, no more.
        layers = cast(list[DecoderLayer], list(self.decoder.layers))
        caches = [KeyValueCache(window=layer.window) for layer in layers]
        return DecoderCache(layers=[LayerCache(self_attention=cache) for cache in caches])

    # -- the whole model ------------------------------------------------------------------

    def forward(
        self,
        src: Tensor | None = None,
        tgt: Tensor | None = None,
        *,
        call: Call = LOGITS,
        token_types: Tensor | None = None,
    ) -> Tensor | Trace:
        """Logits for a batch: ``(B, Tt, V)`` (or ``(B, Ts, V)`` for encoder-only models).

        Args:
            src: ``(B, Ts)`` source ids (encoder-decoder and encoder-only models).
            tgt: ``(B, Tt)`` target ids, shifted right (encoder-decoder and decoder-only).
            call: the operations to run and what to keep
                (:class:`~transformer.core.run.Call`): a capture that traces returns a
                :class:`Trace` of every step instead of the bare logits.
            token_types: ``(B, Ts)`` segment ids of the source, for models with token-type
                embeddings (BERT); all 0 when left out.
        """
        self._check_inputs(src, tgt)
        run = call.run()
        encoded = self._encode(src, run, token_types) if src is not None else None
        decoded = self._run_decoder(tgt, encoded, None, run, True) if tgt is not None else None
        if not run.traced:
            if decoded is not None:
                return self.generator(decoded[0])
            assert encoded is not None
            return self.generator(encoded.memory)
        # A trace computes its logits when read (see Trace): not the (B, T, V) here.
        return _trace(self.config, _LaterProjection(self.generator), encoded, decoded)

    def _check_inputs(self, src: Tensor | None, tgt: Tensor | None) -> None:
        """``ValueError`` unless ``src`` and ``tgt`` are given exactly where the architecture
        needs them, each ``(batch, length)``."""
        config = self.config
        if not config.has_encoder and src is not None:
            raise ValueError("a decoder-only model takes its tokens as tgt, not src")
        if not config.has_decoder and tgt is not None:
            raise ValueError("an encoder-only model takes its tokens as src, not tgt")
        if config.has_encoder and src is None:
            raise ValueError(f"a {config.architecture} model needs src")
        if config.has_decoder and tgt is None:
            raise ValueError(f"a {config.architecture} model needs tgt")


def _trace(
    config: ModelConfig,
    project: _LaterProjection,
    encoded: Encoded | None,
    decoded: tuple[Tensor, StackInput | None, list[LayerTrace], Tensor | None] | None,
) -> Trace:
    """The :class:`Trace` of one captured pass from its two halves (the decoder's as
    :meth:`Transformer._run_decoder` returns it)."""
    hidden, record, layers, causal = decoded if decoded else (None, None, [], None)
    return Trace(
        config=config,
        project=project,
        source=encoded.input if encoded else None,
        target=record,
        encoder_layers=encoded.layers if encoded else [],
        decoder_layers=layers,
        memory=encoded.memory.detach() if encoded else None,
        decoder_output=hidden.detach() if hidden is not None else None,
        causal=causal,
    )


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
