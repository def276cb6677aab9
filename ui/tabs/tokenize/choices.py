"""The tokenizer menu and picking a tokenizer from it: bundled, trained live on the bundled
corpus (with the vocabulary sizes each algorithm can learn there), real, pretrained, uploaded."""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from transformer.text.corpus import bundled_corpus
from transformer.text.encoded import EncodedText
from transformer.text.real_tokenizers import REAL_TOKENIZERS, load_real_tokenizer
from transformer.text.sandbox import TokenizerSandbox
from transformer.text.tokenization import (
    Algorithm,
    Tokenizer,
    train_tokenizer,
)

from ...serving import limits, uploads
from ...serving.errors import InputError, readable_list
from ...serving.inputs import as_int, shown, size_text
from ...serving.state import TRAINED_HERE, ModelRegistry

TOKENIZER_CHOICES = {
    "translate model's tokenizer (BPE)": ("bundled", "translate"),
    "reverse model's tokenizer (WordPiece)": ("bundled", "reverse"),
    "continue model's tokenizer (Unigram)": ("bundled", "continue"),
    "BPE, trained live on the bundled corpus": ("train", "bpe"),
    "byte-level BPE (GPT-2 style), trained live": ("train", "byte_bpe"),
    "WordPiece (BERT style), trained live": ("train", "wordpiece"),
    "Unigram (SentencePiece style), trained live": ("train", "unigram"),
    **{info.label: ("real", name) for name, info in REAL_TOKENIZERS.items()},
    "uploaded tokenizer.json": ("upload", ""),
}
"""The fixed menu; `tokenizer_choices` adds each pretrained model's own tokenizer."""


DEFAULT_VOCAB = 500

VOCAB_RANGE: dict[str, tuple[int, int]] = {
    "bpe": (115, 932),
    "byte_bpe": (263, 1055),
    "wordpiece": (144, 879),
    "unigram": (116, 779),
}
"""Vocabulary sizes each algorithm can train on the bundled corpus, measured (tests train at
both ends): below the low end Unigram and byte-level BPE refuse and BPE/WordPiece return their
alphabet anyway; above the high end every size gives the same tokenizer."""
VOCAB_INFO: dict[str, str] = {
    "bpe": "its 108 characters + 7 special tokens at least; past {hi:,} no pair occurs twice",
    "byte_bpe": "256 bytes + 7 special tokens at least; past {hi:,} no pair occurs twice",
    "wordpiece": "every character, alone and as a ##continuation, + 7 special tokens at least; "
    "past {hi:,} no pair is left to merge",
    "unigram": "room for every character at least; past {hi:,} no more pieces are worth keeping",
}


@lru_cache(maxsize=16)
def corpus_tokenizer(algorithm: str, vocab_size: int) -> Tokenizer:
    """A tokenizer trained on the bundled corpus (cached: training takes ~50 ms)."""
    # train_tokenizer checks the name: a TokenizerError for one it does not know.
    return train_tokenizer(bundled_corpus(), cast(Algorithm, algorithm), vocab_size)


def _pretrained_names(registry: ModelRegistry) -> list[str]:
    return [
        n
        for n in registry.model_names
        if n not in registry.bundled.models
        and n not in registry.bundled.errors
        and n != TRAINED_HERE
    ]


def tokenizer_choices(registry: ModelRegistry) -> dict[str, tuple[str, str]]:
    """Menu label → (kind, name): the fixed `TOKENIZER_CHOICES` with each pretrained model's own
    tokenizer (the shipped all-MiniLM-L6-v2, ``--model`` ones) before the upload."""
    choices = {k: v for k, v in TOKENIZER_CHOICES.items() if v[0] != "upload"}
    for name in _pretrained_names(registry):
        choices[f"{name} model's tokenizer"] = ("model", name)
    choices["uploaded tokenizer.json"] = ("upload", "")
    return choices


def checked_choice(registry: ModelRegistry, choice: Any) -> str:
    """``choice`` if it is one of the menu's labels (:func:`tokenizer_choices`), else an
    :class:`InputError` naming them."""
    choices = tokenizer_choices(registry)
    if not isinstance(choice, str) or choice not in choices:
        raise InputError(
            f"there is no tokenizer called {shown(choice, 60)}: choose "
            f"{readable_list(list(choices), most=4)}"
        )
    return choice


def vocab_in_range(algorithm: str, vocab_size: Any) -> tuple[int, str]:
    """The vocabulary size to train ``algorithm`` with, and a note when the asked size was
    moved into the range the bundled corpus allows (`VOCAB_RANGE`)."""
    asked = as_int(vocab_size, "vocabulary size", 1, 1_000_000)
    low, high = VOCAB_RANGE[algorithm]
    size = min(max(asked, low), high)
    if size == asked:
        return size, ""
    why = "the smallest" if asked < low else "the largest"
    return size, f" ({asked:,} asked; {size:,} is {why} {algorithm} can learn on this corpus)"


def pick_tokenizer(
    registry: ModelRegistry, choice: str, vocab_size: Any, upload: str | None
) -> Tokenizer | UploadedFile:
    """The tokenizer a dropdown choice names (a bundled model's, one trained live, a real one, a
    pretrained model's), or the uploaded file (which only a worker process runs)."""
    return pick_with_note(registry, choice, vocab_size, upload)[0]


def _at_once(work: Callable[[], Tokenizer]) -> Tokenizer:
    return work()


def pick_with_note(
    registry: ModelRegistry,
    choice: str,
    vocab_size: Any,
    upload: str | None,
    run: Callable[[Callable[[], Tokenizer]], Tokenizer] = _at_once,
    build: Callable[[Callable[[], Tokenizer]], Tokenizer] = _at_once,
) -> tuple[Tokenizer | UploadedFile, str]:
    """The tokenizer and a note on its vocabulary size (for live-trained ones). Training one
    live is done by ``run`` and building a real one (once per server) by ``build``, which the
    handlers give time limits; a model's tokenizer comes with its model; an upload is returned
    unread."""
    kind, name = tokenizer_choices(registry)[checked_choice(registry, choice)]
    if kind == "bundled":
        return registry.checkpoint(name, None).tokenizer, ""
    if kind == "model":
        return registry.checkpoint(name, None).tokenizer, ""
    if kind == "real":
        return build(lambda: load_real_tokenizer(name)), ""
    if kind == "train":
        size, note = vocab_in_range(name, vocab_size)
        return run(lambda: corpus_tokenizer(name, size)), note
    if not upload:
        raise InputError("upload a tokenizer.json file first (or pick another tokenizer)")
    return uploaded_tokenizer(upload), ""


@dataclass(frozen=True)
class UploadedFile:
    """An uploaded ``tokenizer.json``: never loaded in this process. `upload_sandbox`'s worker
    processes read and run it, within a memory, CPU-time and wall-clock limit."""

    path: Path

    def encode(self, text: str, deadline: float | None = None) -> EncodedText:
        """The token view of ``text`` by this tokenizer, computed in a worker by
        ``deadline`` (``limits.TOKENIZER_TIME_LIMIT_S`` from now by default)."""
        if deadline is None:
            deadline = time.monotonic() + limits.TOKENIZER_TIME_LIMIT_S
        return upload_sandbox().encode_text(
            self.path,
            text,
            deadline,
            time_limit_s=limits.TOKENIZER_TIME_LIMIT_S,
            max_chars=limits.MAX_TEXT,
        )


_SANDBOX: TokenizerSandbox | None = None
_SANDBOX_LOCK = threading.Lock()


def upload_sandbox() -> TokenizerSandbox:
    """The worker processes that run uploaded tokenizers (started at the first upload), with
    the app's limits (`limits.TOKENIZER_WORKERS`, ``SANDBOX_MEMORY_BYTES``, ``SANDBOX_CPU_S``)."""
    global _SANDBOX
    with _SANDBOX_LOCK:
        if _SANDBOX is None:
            _SANDBOX = TokenizerSandbox(
                workers=limits.TOKENIZER_WORKERS,
                memory_bytes=limits.SANDBOX_MEMORY_BYTES,
                cpu_seconds=limits.SANDBOX_CPU_S,
                time_limit_s=limits.TOKENIZER_TIME_LIMIT_S,
            )
            atexit.register(_SANDBOX.close)
        return _SANDBOX


def uploaded_tokenizer(upload: Any) -> UploadedFile:
    """The uploaded ``tokenizer.json``, checked for what this process can check without reading
    it (that it is a file within the size limit); its tokenizer runs only in a worker."""
    if not isinstance(upload, str | Path):
        raise InputError("the uploaded file must be a tokenizer.json file")
    path = Path(upload)
    try:
        size = path.stat().st_size
    except OSError:
        raise InputError("the uploaded file is gone: upload it again") from None
    if size > limits.MAX_UPLOAD_BYTES:
        raise InputError(
            f"the uploaded file is larger than the limit of {size_text(limits.MAX_UPLOAD_BYTES)}"
        )
    uploads.touch(path)  # in use: not deleted as idle
    return UploadedFile(path)
