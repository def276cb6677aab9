"""What the token view draws of one text, as plain data: `EncodedText`, computed by
`encode_text` where the tokenizer runs, and its JSON form (`encoded_to_json`,
`encoded_from_json`), in which a worker process of `transformer.text.sandbox` answers: plain
data, never a pickle, crosses from a process that ran an untrusted file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .replay import (
    BPEMerge,
    BPEReplay,
    MergeHistory,
    UnigramPiece,
    UnigramReplay,
    WordPieceChoice,
    WordPieceReplay,
    WordReplay,
    replay,
)
from .tokenization import Tokenizer, TokenizerError, TokenRecord, unreadable_characters


@dataclass(frozen=True)
class EncodedText:
    """What the token view draws of one text, computed where the tokenizer runs.

    ``records`` are the tokens (with the post-processor's additions); ``unreadable`` the
    characters the tokenizer maps to its unknown token (computed only when it does);
    ``replay`` how the tokenizer reached each word's pieces, or None with ``replay_error``
    saying why there is none (e.g. a WordLevel model has no steps)."""

    algorithm: str
    vocab_size: int
    unk_id: int | None
    unk_piece: str | None
    records: tuple[TokenRecord, ...]
    unreadable: tuple[str, ...]
    replay: tuple[WordReplay, ...] | None
    replay_error: str = ""


def encode_text(tokenizer: Tokenizer, text: str, with_replay: bool = True) -> EncodedText:
    """Encode ``text`` for the token view, in this process: the tokens, the characters read as
    unknown, and the replay (a failed replay is its message, never an error)."""
    records = tuple(tokenizer.encode(text))
    unk = tokenizer.unk_id
    unreadable: tuple[str, ...] = ()
    if unk is not None and any(r.id == unk and r.start < r.end for r in records):
        unreadable = tuple(unreadable_characters(tokenizer, text))
    steps: tuple[WordReplay, ...] | None = None
    error = ""
    if with_replay:
        try:
            steps = tuple(replay(tokenizer, text))
        except TokenizerError as err:
            error = str(err)
    return EncodedText(
        algorithm=tokenizer.algorithm,
        vocab_size=tokenizer.vocab_size,
        unk_id=unk,
        unk_piece=None if unk is None else tokenizer.id_to_token(unk),
        records=records,
        unreadable=unreadable,
        replay=steps,
        replay_error=error,
    )


# -- the answer as JSON ---------------------------------------------------------------------


def _step_to_json(step: BPEReplay | WordPieceReplay | UnigramReplay | None) -> Any:
    if step is None:
        return None
    if isinstance(step, BPEReplay):
        history = step.merges[0]._history.steps if step.merges else []
        return {
            "kind": "bpe",
            "symbols": list(step.symbols),
            "whole_word": step.whole_word,
            "merges": [
                [list(m.pair), m.rank, m.result, m.position, m.result_id] for m in step.merges
            ],
            "history": [list(h) for h in history],
        }
    if isinstance(step, WordPieceReplay):
        return {
            "kind": "wordpiece",
            "choices": [[c.start, c.piece, list(c.rejected)] for c in step.choices],
            "unknown_reason": step.unknown_reason,
        }
    return {
        "kind": "unigram",
        "pieces": [[p.piece, p.score, p.start, p.end, p.unknown] for p in step.pieces],
        "total_score": step.total_score,
        "best_scores": list(step.best_scores),
        "unk_score": step.unk_score,
    }


def _step_from_json(data: Any) -> BPEReplay | WordPieceReplay | UnigramReplay | None:
    if data is None:
        return None
    if data["kind"] == "bpe":
        history = MergeHistory(tuple(data["symbols"]))
        history.steps = [(int(a), int(b), str(c)) for a, b, c in data["history"]]
        merges = tuple(
            BPEMerge(
                pair=(pair[0], pair[1]),
                rank=rank,
                result=result,
                position=position,
                result_id=result_id,
                _history=history,
                _index=index,
            )
            for index, (pair, rank, result, position, result_id) in enumerate(data["merges"])
        )
        return BPEReplay(tuple(data["symbols"]), merges, bool(data["whole_word"]))
    if data["kind"] == "wordpiece":
        choices = tuple(WordPieceChoice(s, p, tuple(r)) for s, p, r in data["choices"])
        return WordPieceReplay(choices, data["unknown_reason"])
    pieces = tuple(UnigramPiece(p, float(sc), s, e, bool(u)) for p, sc, s, e, u in data["pieces"])
    return UnigramReplay(
        pieces, float(data["total_score"]), tuple(data["best_scores"]), float(data["unk_score"])
    )


def encoded_to_json(encoded: EncodedText) -> dict[str, Any]:
    """`EncodedText` as plain JSON data (lists, dicts, strings, numbers)."""
    return {
        "algorithm": encoded.algorithm,
        "vocab_size": encoded.vocab_size,
        "unk_id": encoded.unk_id,
        "unk_piece": encoded.unk_piece,
        "records": [[r.piece, r.id, r.start, r.end, r.special, r.word] for r in encoded.records],
        "unreadable": list(encoded.unreadable),
        "replay": None
        if encoded.replay is None
        else [
            [
                w.word,
                w.start,
                w.end,
                list(w.pieces),
                list(w.ids),
                w.added_token,
                _step_to_json(w.steps),
            ]
            for w in encoded.replay
        ],
        "replay_error": encoded.replay_error,
    }


def encoded_from_json(data: dict[str, Any]) -> EncodedText:
    """The `EncodedText` that `encoded_to_json` wrote."""
    words = data["replay"]
    return EncodedText(
        algorithm=str(data["algorithm"]),
        vocab_size=int(data["vocab_size"]),
        unk_id=data["unk_id"],
        unk_piece=data["unk_piece"],
        records=tuple(
            TokenRecord(p, i, s, e, bool(sp), w) for p, i, s, e, sp, w in data["records"]
        ),
        unreadable=tuple(data["unreadable"]),
        replay=None
        if words is None
        else tuple(
            WordReplay(w, s, e, tuple(p), tuple(i), bool(a), _step_from_json(st))
            for w, s, e, p, i, a, st in words
        ),
        replay_error=str(data["replay_error"]),
    )
