"""What a tokenizer's worker may cost the server: its answer is bounded and summarised in the
worker, a text is counted after the tokenizer's normaliser (for every kind of tokenizer), and a
worker that crashes is named by its signal.

The lengths after normalising are computed here with `unicodedata` (the reference), the
WordPiece candidates by a greedy longest-match written out in the test."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import unicodedata
from collections.abc import Iterator

import pytest
import torch
from tokenizer_files import tokenizer_json

from transformer.text import sandbox as sandbox_module
from transformer.text.encoded import encode_text, encoded_to_json
from transformer.text.sandbox import SandboxError, TokenizerSandbox, ending
from transformer.text.tokenization import Tokenizer, TokenizerError
from transformer.text.untrusted import MAX_WORDPIECE_CHARS, check_tokenizer_json
from ui.serving import limits
from ui.serving.errors import InputError

WIDE = "\ufdfa"  # NFKC writes it as 18 characters


def wordpiece(vocab: list[str], most: int = 100) -> dict:
    return {
        "type": "WordPiece",
        "unk_token": "[UNK]",
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": most,
        "vocab": {piece: i for i, piece in enumerate(vocab)},
    }


WORD_BOMB = tokenizer_json(wordpiece(["[UNK]", "a"], most=1_000_000_000))  # 347 bytes


@pytest.fixture(scope="module")
def sandbox() -> Iterator[TokenizerSandbox]:
    box = TokenizerSandbox(workers=1, time_limit_s=10.0)
    yield box
    box.close()


def test_the_wordpiece_word_bomb_is_refused_with_its_parameter(sandbox: TokenizerSandbox) -> None:
    """A 347-byte file whose WordPiece tries every prefix of a 20,000-letter word: refused by
    the checks, in the worker, before the library or the replay runs."""
    assert len(WORD_BOMB) < 400
    with pytest.raises(TokenizerError) as raised:
        sandbox.encode_text(WORD_BOMB, "z" * 20_000)
    message = str(raised.value)
    assert "max_input_chars_per_word is 1,000,000,000" in message
    assert f"{MAX_WORDPIECE_CHARS:,}" in message
    fine = tokenizer_json(wordpiece(["[UNK]", "a"], most=MAX_WORDPIECE_CHARS))
    check_tokenizer_json(fine)


def greedy_candidates(word: str, vocab: set[str]) -> list[tuple[str | None, list[str]]]:
    """WordPiece's greedy longest match, written out: each choice and the candidates it
    rejected first (longest first)."""
    out: list[tuple[str | None, list[str]]] = []
    start = 0
    while start < len(word):
        rejected = []
        for end in range(len(word), start, -1):
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                out.append((candidate, rejected))
                start = end
                break
            rejected.append(candidate)
        else:
            out.append((None, rejected))
            break
    return out


def test_a_wordpiece_choice_sends_the_candidates_the_view_shows(sandbox: TokenizerSandbox) -> None:
    vocab = ["[UNK]", "un", "##bel", "##ie", "##va", "##ble", "##b", "##e"]
    data = tokenizer_json(wordpiece(vocab), pre_tokenizer={"type": "Whitespace"})
    encoded = sandbox.encode_text(data, "unbelievable")
    assert encoded.replay is not None
    steps = encoded.replay[0].steps
    expected = greedy_candidates("unbelievable", set(vocab))
    assert [c.piece for c in steps.choices] == [piece for piece, _ in expected]  # type: ignore[union-attr]
    assert [list(c.rejected) for c in steps.choices] == [r[-3:] for _, r in expected]  # type: ignore[union-attr]
    assert max(len(r) for _, r in expected) > 3  # some choice was cut


def test_an_answer_too_large_drops_its_replay_then_becomes_an_error() -> None:
    tokenizer = Tokenizer.from_json_str(
        tokenizer_json(wordpiece(["[UNK]", "a", "##a"]), pre_tokenizer={"type": "Whitespace"})
    )
    result = encoded_to_json(encode_text(tokenizer, "a " * 300))
    whole = len(json.dumps({"result": result}).encode())
    without_replay = len(json.dumps({"result": {**result, "replay": None}}).encode())
    fits = json.loads(sandbox_module._bounded_answer({"result": result}, whole))
    assert fits["result"]["replay"] is not None
    dropped = json.loads(sandbox_module._bounded_answer({"result": result}, whole - 1))
    assert dropped["result"]["replay"] is None
    assert "try a shorter text" in dropped["result"]["replay_error"]
    assert dropped["result"]["records"] == result["records"]
    refused = json.loads(sandbox_module._bounded_answer({"result": result}, without_replay // 2))
    assert "tokens take" in refused["error"]
    assert sandbox_module.MAX_ANSWER_BYTES <= 16 * 2**20


def test_an_uploaded_tokenizer_counts_the_text_after_its_normaliser(
    sandbox: TokenizerSandbox,
) -> None:
    data = tokenizer_json(
        {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"},
        normalizer={"type": "NFKC"},
        pre_tokenizer={"type": "Whitespace"},
    )
    text = WIDE * 2_000
    written = len(unicodedata.normalize("NFKC", text))
    assert written == 36_000
    with pytest.raises(TokenizerError) as raised:
        sandbox.encode_text(data, text, max_chars=20_000)
    message = str(raised.value)
    assert f"{written:,} characters long" in message and "20,000" in message
    # Within the limit once normalised, it is encoded.
    assert sandbox.encode_text(data, WIDE * 1_000, max_chars=20_000).records


@pytest.fixture(scope="module")
def registry():  # type: ignore[no-untyped-def]
    from ui.serving.state import ModelRegistry

    return ModelRegistry(torch.device("cpu"))


@pytest.mark.parametrize(
    "choice",
    ["continue model's tokenizer (Unigram)", "translate model's tokenizer (BPE)"],
)
def test_the_app_s_own_tokenizers_count_the_text_after_their_normaliser(
    registry, choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests of 20,000 U+FDFA (360,000 characters once normalised) held the tokenizer
    threads past their limit, and their work went on after it."""
    from ui.tabs.tokenize.handlers import TokenizeRequest, _views

    monkeypatch.setattr(limits, "MAX_TEXT", 400)
    within = WIDE * (400 // 18)
    over = WIDE * (400 // 18 + 1)
    assert len(unicodedata.normalize("NFKC", within)) <= 400
    assert len(unicodedata.normalize("NFKC", over)) > 400
    _views(registry, TokenizeRequest.of(registry, within, choice, 500, None, "(none)"))
    with pytest.raises(InputError) as raised:
        _views(registry, TokenizeRequest.of(registry, over, choice, 500, None, "(none)"))
    assert "414 characters long" in str(raised.value) and "400" in str(raised.value)


def test_a_worker_that_crashes_is_named_by_its_signal() -> None:
    """A worker that dies of SIGSEGV (as `tokenizers` does when a file makes it crash) is
    named, with what to do, not "ended unexpectedly"."""
    box = TokenizerSandbox(workers=1, time_limit_s=20.0)
    slow = tokenizer_json(
        {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"},
        pre_tokenizer={
            "type": "Split",
            "pattern": {"Regex": "(a|aa)+$"},
            "behavior": "Isolated",
            "invert": False,
        },
    )
    try:
        box.encode_text(slow, "a")  # the worker is started and holds the file
        (pid,) = box.pids()

        def crash() -> None:
            time.sleep(0.5)
            os.kill(pid, signal.SIGSEGV)

        threading.Thread(target=crash, daemon=True).start()
        with pytest.raises(SandboxError) as raised:
            box.encode_text(slow, ("a" * 22 + "!") * 869)
        message = str(raised.value)
        assert "SIGSEGV" in message and "crash" in message and "check the file" in message
    finally:
        box.close()


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (-signal.SIGSEGV, ["crash", "SIGSEGV", "check the file"]),
        (-signal.SIGABRT, ["SIGABRT", "memory"]),
        (-signal.SIGXCPU, ["CPU time", "SIGXCPU"]),
        (3, ["status 3"]),
    ],
)
def test_each_ending_says_what_happened(code: int, words: list[str]) -> None:
    message = ending(code, 20, 2**30)
    assert all(word in message for word in words), message
    assert "unexpectedly" not in message
