"""Helpers for reading an analysis, shared by the app and a notebook: which tokens label the
axes of an attention view, which keys are real, what the decoder reads when teacher-forced, the
what-if switches by name, where a decoding from text starts and stops (and starting one), and
where a model's parameters are.

    >>> pieces_q, pieces_k = axis_pieces(analysis, "cross")
    >>> intervention = what_if(["causal mask off"])
    >>> session, source_pieces = start_decoding(model, tokenizer, "the cat", DecodingSettings())
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torch import Tensor

from ..core.config import ModelConfig
from ..core.model import Transformer, count_parameters
from ..core.trace import AttentionKind, AttentionRecord, Trace
from ..core.util import pad
from ..generation import DecodingSession, DecodingSettings, decoding_ends, source_ends_with_eos
from ..text.display import (
    VISIBLE_MARKS,
    label_pieces,
    labels_legend,
    labels_of_pieces,
    piece_scheme,
)
from ..text.tokenization import Tokenizer, unreadable_characters
from . import switches
from .inspection import Analysis
from .interventions import WHAT_IF_FIELDS, Intervention, combined

# The what-if switches by the label a learner reads, and the Intervention field each turns off
# (their records, with what they do and where they apply, are in ``switches.WHAT_IFS``).
WHAT_IF_SWITCHES: dict[str, str] = {
    switch.label: WHAT_IF_FIELDS[switch] for switch in switches.WHAT_IFS
}


def what_if_switches(config: ModelConfig) -> list[str]:
    """The labels of the what-if switches that change something in a model of ``config``
    (:meth:`~transformer.lab.switches.Switch.applies`): all but "causal mask off" for an
    encoder-only model, which has no causal mask to take off."""
    return [switch.label for switch in switches.applicable(config, switches.WHAT_IF)]


def what_if(
    labels: Iterable[str], head: tuple[AttentionKind, int, int] | None = None
) -> Intervention:
    """The :class:`Intervention` that the what-ifs labelled ``labels`` (keys of
    ``WHAT_IF_SWITCHES``) ask for together.

    ``head`` is the ``(kind, layer, head)`` (0-based) that "zero this head" switches off.
    """
    return combined(switches.what_ifs(labels), head)


def visible_text(text: str) -> str:
    """``text`` with the characters a reader cannot see written as marks (:data:`VISIBLE_MARKS`):
    ``" cat\n"`` → ``"␣cat↵"``."""
    for char, (mark, _) in VISIBLE_MARKS.items():
        text = text.replace(char, mark)
    return text


def shown_piece(tokenizer: Tokenizer, piece: str) -> str:
    """A token piece alone as the app writes it (:mod:`transformer.text.display`): a byte-level
    piece (GPT-2, SmolLM2, cl100k_base) as the text its bytes stand for with spaces and line
    breaks as marks (``"Ġlicenses"`` → ``"␣licenses"``, ``"Ċ"`` → ``"↵"``), invisible
    characters named (``⟨VS16⟩``), right-to-left text isolated; alone, a byte of a split
    character is its code (``⟨0xE7⟩[1/3]``): :func:`shown_pieces` names the character from the
    sequence. Special tokens as they are."""
    return label_pieces(piece_scheme(tokenizer), [piece])[0].text


def shown_pieces(tokenizer: Tokenizer, pieces: Sequence[str]) -> list[str]:
    """The pieces of one sequence as the app writes them, each split character named with
    which of its bytes the piece holds (``美[1-2/3]``, ``美[3/3]``): see
    :mod:`transformer.text.display`."""
    return labels_of_pieces(tokenizer, pieces)


def piece_legend(tokenizer: Tokenizer, pieces: Sequence[str]) -> str:
    """What the marks in these pieces (one sequence, as :func:`shown_pieces` writes them) stand
    for, and how the vocabulary stores them: ``"␣ is a space (stored as Ġ); 美[1-2/3] is bytes
    1-2 of the 3 bytes of 美 (U+7F8E), split across pieces"``; ``""`` for pieces without
    marks."""
    return labels_legend(tokenizer, label_pieces(piece_scheme(tokenizer), pieces))


def toy_vocabulary(task: str | None, text: str) -> tuple[list[str], list[str]]:
    """(known, unknown): the words of ``text`` (lower-cased, in order, each once) that the toy
    ``task``'s vocabulary holds and those it does not. The toy English of ``translate`` and
    ``continue`` has about 80 words (:data:`~transformer.training.tasks.TRANSLATE_LEXICON`): a
    word outside it is still cut into pieces the tokenizer knows, and translated into whatever
    those pieces suggest. ``([], [])`` for any other task (reverse reads unknown letters as
    [UNK], which its own note says)."""
    if task not in ("translate", "continue"):
        return [], []
    from ..training.tasks import TRANSLATE_LEXICON

    words = list(dict.fromkeys(word.strip(".,;:!?\"'()").lower() for word in text.split()))
    words = [word for word in words if word]
    return (
        [word for word in words if word in TRANSLATE_LEXICON],
        [word for word in words if word not in TRANSLATE_LEXICON],
    )


def toy_vocabulary_note(task: str | None, text: str, most: int = 8) -> str:
    """One sentence (Markdown) naming the words of ``text`` that the toy ``task`` never saw in
    training, and the ones it knows (at most ``most`` of each), or ``""`` when it knows them all
    or is not a toy task."""
    known, unknown = toy_vocabulary(task, text)
    if not unknown:
        return ""

    def listed(words: list[str]) -> str:
        more = f" and {len(words) - most} more" if len(words) > most else ""
        return ", ".join(f"`{word}`" for word in words[:most]) + more

    knows = f"; it knows {listed(known)}" if known else "; it knows none of these words"
    return (
        f"⚠️ The toy {task} model's vocabulary (its {_toy_size()} words of toy English) has no "
        f"{listed(unknown)}: it cuts such a word into pieces it knows and guesses from them{knows}."
    )


def _toy_size() -> int:
    from ..training.tasks import TRANSLATE_LEXICON

    return len(TRANSLATE_LEXICON)


def axis_pieces(analysis: Analysis, kind: AttentionKind) -> tuple[list[list[str]], list[list[str]]]:
    """Per sentence, the token pieces on the query axis and on the key axis of ``kind``.

    Encoder self-attention: source × source; decoder self-attention: target × target;
    cross-attention: target (queries) × source (keys). A decoder-only model has no source,
    so its keys are target pieces.
    """
    queries = analysis.source_pieces if kind == "encoder_self" else analysis.target_pieces
    if kind == "decoder_self":
        keys = analysis.target_pieces
    else:
        keys = analysis.source_pieces or analysis.target_pieces
    return queries, keys


def real_keys(trace: Trace, kind: AttentionKind, row: int) -> Tensor:
    """``(Tk,)`` bool, ``True`` for the real (not padding) keys of ``kind`` in sentence ``row``."""
    stack = (trace.source if kind != "decoder_self" else trace.target) or trace.target
    if stack is None:
        raise ValueError("the trace has no inputs: run the pass with call=TRACE")
    return stack.real_tokens[row]


def padded_query_rows(analysis: Analysis, kind: AttentionKind, row: int) -> Tensor:
    """``(Tq,)`` bool, ``True`` for the [PAD] query rows of ``kind`` in sentence ``row``: the
    run of padding ids that ends the (right-padded) sequence. A model whose pad token is a real
    token (GPT-2's ``<|endoftext|>``) does not mask these, but they are padding all the same."""
    stack = analysis.trace.source if kind == "encoder_self" else analysis.trace.target
    if stack is None:
        raise ValueError(f"this {analysis.trace.config.architecture} model has no {kind} attention")
    tokens = stack.tokens[row].cpu()
    is_pad = tokens == analysis.trace.config.pad_id
    # Trailing pads only: a decoder's first token may be the pad id (Marian, GPT-2 start there).
    trailing = is_pad.flip(0).cumprod(0).flip(0).bool()
    trailing[0] = False
    return trailing | ~stack.real_tokens[row].cpu()


@dataclass(frozen=True)
class SentenceAttention:
    """One attention kind of an analysis in one of its sentences: every layer's record and
    what the two axes hold.

    Attributes:
        records: the kind's :class:`~transformer.core.trace.AttentionRecord` per layer, in
            layer order (their tensors hold every sentence: ``(B, H, Tq, Tk)``).
        queries, keys: the sentence's token pieces as the tokenizer wrote them, ``Tq`` and
            ``Tk`` of them.
        shown_queries, shown_keys: the same pieces as a student reads them (byte-level marks
            written as text: ``␣licenses``, not ``Ġlicenses``; see :func:`shown_pieces`).
        padded_queries: ``(Tq,)`` bool, the [PAD] query rows (:func:`padded_query_rows`).
        real_keys: ``(Tk,)`` bool, the keys that are real tokens (:func:`real_keys`).
        legend: what the marks in the shown pieces stand for (:func:`piece_legend`), ``""``
            where they have none.
    """

    records: list[AttentionRecord]
    queries: list[str]
    keys: list[str]
    shown_queries: list[str]
    shown_keys: list[str]
    padded_queries: Tensor
    real_keys: Tensor
    legend: str


def sentence_attention(
    analysis: Analysis, tokenizer: Tokenizer, kind: AttentionKind, row: int
) -> SentenceAttention:
    """``kind``'s attention in sentence ``row`` (0-based) of ``analysis``: its records and its
    queries × keys as :func:`axis_pieces` pairs them, as written and as shown, with their
    padding and the legend of their marks. ``ValueError`` for a kind the model does not have."""
    queries, keys = axis_pieces(analysis, kind)
    padded, real = padded_query_rows(analysis, kind, row), real_keys(analysis.trace, kind, row)
    records = analysis.trace.attention_records(kind)
    scheme = piece_scheme(tokenizer)
    query_labels = label_pieces(scheme, queries[row])
    key_labels = label_pieces(scheme, keys[row])
    return SentenceAttention(
        records=records,
        queries=queries[row],
        keys=keys[row],
        shown_queries=[label.text for label in query_labels],
        shown_keys=[label.text for label in key_labels],
        padded_queries=padded,
        real_keys=real,
        legend=labels_legend(tokenizer, [*query_labels, *key_labels]),
    )


@dataclass(frozen=True)
class UnreadText:
    """What a model did not read as written in the sentences of an analysis.

    Attributes:
        rows: the sentences (0-based) whose tokens hold the tokenizer's unknown token: those
            have characters the model cannot read (:func:`unreadable_characters` names them;
            only these need tokenizing again to find them).
        toy_note: the words a toy model never saw (:func:`toy_vocabulary_note`), or ``""``.
    """

    rows: tuple[int, ...]
    toy_note: str


def unread_text(
    analysis: Analysis, tokenizer: Tokenizer, task: str | None, sentences: Sequence[str]
) -> UnreadText:
    """What the model of ``task`` (its checkpoint's task, ``None`` for a pretrained one) did
    not read as written in ``sentences``, the analysis's own: the sentences whose input holds
    the unknown token (read from the analysis's tokens, not tokenized again), and the words a
    toy model's vocabulary lacks."""
    trace, unk = analysis.trace, tokenizer.unk_id
    read = trace.source if trace.source is not None else trace.target
    rows: tuple[int, ...] = ()
    if unk is not None and read is not None:
        holds_unk = (read.tokens == unk).any(dim=1).tolist()  # (B,) per sentence
        rows = tuple(b for b, held in enumerate(holds_unk) if held)
    return UnreadText(rows, toy_vocabulary_note(task, " ".join(sentences)))


def reference_targets(
    tokenizer: Tokenizer, model_task: str | None, sentences: Sequence[str], pad_id: int
) -> Tensor | None:
    """``(B, T)`` decoder inputs ``[BOS] + reference answer`` for teacher-forced analysis, padded
    with ``pad_id``; ``None`` when the task has no known answer for some sentence."""
    # The toy tasks know the answers; imported here so that importing this module does not
    # load their grammar.
    from ..training.tasks import reference_target

    answers = [reference_target(model_task or "", sentence) for sentence in sentences]
    known = [answer for answer in answers if answer is not None]
    if len(known) < len(answers):
        return None
    bos = tokenizer.bos_id
    if bos is None:
        raise ValueError("the tokenizer has no begin-of-sequence token to start the answers")
    rows = [[bos, *tokenizer.encode_ids(answer)] for answer in known]
    return pad(rows, pad_id)


def prompt_ids(model: Transformer, tokenizer: Tokenizer, text: str) -> list[int]:
    """The ids a decoding starts from, as each family was trained to read them: the source
    sentence of an encoder-decoder model (ending with the model's own end id where its
    configuration names one: Marian's ``</s>``), or the prompt of a decoder-only model (which
    begins with the tokenizer's ``[BOS]`` when it has one, as in training; GPT-2's is
    ``<|endoftext|>``; none where the model's ``prompt_bos`` says no, as SmolLM2's file does).
    A prompt that already opens with a special token gets no ``[BOS]`` in front: a chat
    template's ``<|im_start|>`` is where the model's chat format begins, exactly as
    ``transformers``' ``apply_chat_template`` tokenizes it."""
    if not (text or "").strip():
        raise ValueError("enter a source sentence (or a prompt) first")
    config = model.config
    if not config.has_decoder:
        raise ValueError(f"a {config.architecture} model has no decoder, so it cannot generate")
    ids = tokenizer.encode_ids(text)
    first = tokenizer.id_to_token(ids[0]) if ids and ids[0] in tokenizer.special_ids else None
    opens_special = first is not None and text.startswith(first)  # not an unknown word's [UNK]
    decoder_only = config.architecture == "decoder-only"
    if decoder_only and config.prompt_bos and tokenizer.bos_id is not None and not opens_special:
        ids.insert(0, tokenizer.bos_id)
    _start, end = decoding_ends(config, tokenizer.bos_id, tokenizer.eos_id)
    if source_ends_with_eos(config) and end is not None and ids[-1:] != [end]:
        ids.append(end)
    if not ids:
        raise ValueError("the text gives no tokens: enter a source sentence (or a prompt)")
    return ids


def decoding_ids(
    model: Transformer, tokenizer: Tokenizer, text: str
) -> tuple[list[int], int | None, int | None]:
    """``(source or prompt ids, first decoder id, end id)`` of a decoding from ``text``: where
    each family starts and stops (:func:`prompt_ids`, and
    :func:`~transformer.generation.decoding_ends`: Marian's own start id and ``</s>``, else the
    tokenizer's [BOS]/[EOS]; GPT-2's ``<|endoftext|>``). The first id is ``None`` only for a
    decoder-only model, which continues its prompt and never reads one; the end id is ``None``
    where neither the model nor its tokenizer names one (the decoding then stops at its length).
    """
    ids = prompt_ids(model, tokenizer, text)
    start, end = decoding_ends(model.config, tokenizer.bos_id, tokenizer.eos_id)
    if model.config.has_encoder and start is None:
        raise ValueError(
            "neither the model nor its tokenizer names the decoder's first id: give the model "
            "a decoder_start_id or the tokenizer a [BOS] token"
        )
    return ids, start, end


def start_decoding(
    model: Transformer, tokenizer: Tokenizer, text: str, settings: DecodingSettings
) -> tuple[DecodingSession, list[str]]:
    """A step-by-step :class:`DecodingSession` from text, and the pieces of its source/prompt.

    Works for every model with a decoder: it starts and stops where :func:`decoding_ids` says.
    """
    ids, start, end = decoding_ids(model, tokenizer, text)
    session = DecodingSession(
        model,
        ids,
        settings,
        bos_id=start,
        eos_id=end,
        # The records' labels written as every view writes a piece (␣Paris, not ĠParis).
        decode_token=lambda i: shown_piece(tokenizer, tokenizer.id_to_token(i) or "?"),
    )
    return session, [tokenizer.id_to_token(i) or "?" for i in ids]


def parameter_groups(model: Transformer) -> dict[str, int]:
    """Parameters per component (in the paper's order), each tied tensor counted once, in the
    first component that holds it; components without parameters are left out, and the last
    entry, ``"total"``, is :func:`~transformer.core.model.count_parameters`."""
    tied = model.config.tie_embeddings
    groups = {
        "token embeddings (shared)" if tied else "token embeddings": (
            "src_embedding",
            "tgt_embedding",
        ),
        "positional (learned only)": ("src_positional", "tgt_positional"),
        "encoder layers": ("encoder",),
        "decoder layers": ("decoder",),
        "generator": ("generator",),
    }
    counts = dict.fromkeys(groups, 0)
    # named_parameters() yields each shared tensor once, under the first name that holds it,
    # which is how count_parameters counts too.
    for name, parameter in model.named_parameters():
        top = name.split(".")[0]
        label = next((label for label, owners in groups.items() if top in owners), "other")
        counts[label] = counts.get(label, 0) + parameter.numel()
    result = {label: n for label, n in counts.items() if n}
    result["total"] = count_parameters(model)
    return result


# Within a layer of a modern (Llama-family) block: sublayer module → matrix → label.
_MATRIX_LABELS: dict[str, str] = {
    "w_q": "attention W_q",
    "w_k": "attention W_k",
    "w_v": "attention W_v",
    "w_o": "attention W_o",
    "w_gate": "feed-forward W_gate",
    "w_up": "feed-forward W_up",
    "w_down": "feed-forward W_down",
    "w_1": "feed-forward W_1",
    "w_2": "feed-forward W_2",
}


def layer_parameter_groups(model: Transformer) -> dict[str, int]:
    """Parameters of every layer of each stack, per matrix (summed over the layers): for a
    decoder ``"decoder attention W_q"``, ``W_k``, ``W_v``, ``W_o`` (biases with their matrix),
    ``"decoder feed-forward W_gate"``/``W_up``/``W_down`` (``W_1``/``W_2`` ungated), and
    ``"decoder norms"`` (the norms around each sublayer); the stack's final norm is not a layer.
    Cross-attention matrices are labelled ``cross-attention``."""
    counts: dict[str, int] = {}
    for name, parameter in model.named_parameters():
        parts = name.split(".")
        if len(parts) < 5 or parts[1] != "layers":
            continue
        stack, sublayer, leaf = parts[0], parts[3], parts[4]
        if sublayer.endswith("_residual") or "norm" in sublayer:
            label = f"{stack} norms"
        elif leaf in _MATRIX_LABELS:
            what = _MATRIX_LABELS[leaf]
            if sublayer.startswith("cross"):
                what = what.replace("attention", "cross-attention")
            label = f"{stack} {what}"
        else:
            label = f"{stack} other"
        counts[label] = counts.get(label, 0) + parameter.numel()
    return counts


def kv_cache_bytes_per_token(config: ModelConfig, grouped: bool = True, bytes_per: int = 4) -> int:
    """Bytes the key/value cache grows by per generated token: ``2 (k and v) × decoder layers ×
    heads × d_head × bytes_per`` (float32: 4), with the config's key/value heads
    (``kv_heads``, grouped-query) or, ``grouped=False``, one per query head (``n_heads``)."""
    heads = config.kv_heads if grouped else config.n_heads
    return 2 * config.n_decoder_layers * heads * config.d_head * bytes_per


__all__ = [
    "WHAT_IF_SWITCHES",
    "axis_pieces",
    "decoding_ids",
    "kv_cache_bytes_per_token",
    "layer_parameter_groups",
    "parameter_groups",
    "prompt_ids",
    "real_keys",
    "reference_targets",
    "sentence_attention",
    "start_decoding",
    "unread_text",
    "unreadable_characters",
    "what_if",
]
