"""Untrusted tokenizer.json files: checked before loading, and run only in worker processes
that are stopped at a memory, CPU-time or wall-clock limit, while this process goes on.

Each hostile file is written here with `tokenizers`' own JSON layout (a WordLevel model, the
smallest that loads). A counter thread of this process ticks throughout: the server's threads
must never wait on the tokenizer (the library keeps the interpreter lock while it encodes, so a
file run in-process would stop the counter)."""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tokenizers
from tokenizer_files import tokenizer_json

from transformer.text.real_tokenizers import load_real_tokenizer
from transformer.text.sandbox import SandboxError, TokenizerSandbox
from transformer.text.tokenization import TokenizerError
from transformer.text.untrusted import check_tokenizer_json, nested_repetition

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 3.0


def word_level(vocab: dict, normalizer=None, pre_tokenizer=None, **extra) -> bytes:
    """A WordLevel tokenizer.json as `tokenizers` writes one."""
    model = {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    return tokenizer_json(model, normalizer, pre_tokenizer, **extra)


def split_on(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def doubling(times: int) -> dict:
    step = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
    return {"type": "Sequence", "normalizers": [step] * times}


REGEX_BOMB = word_level({"[UNK]": 0, "a": 1}, pre_tokenizer=split_on("(a+)+$"))  # 338 bytes
CHAIN_BOMB = word_level({"[UNK]": 0, "a": 1}, normalizer=doubling(20))  # 1.6 KB
SPARSE_BOMB = word_level({"[UNK]": 0, "a": 2_147_483_647})  # 253 bytes
BOMB_TEXT = ("a" * 22 + "!") * 869  # 19,987 characters


class Ticker:
    """A thread of this process that counts while it can run."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.count += 1
            time.sleep(0.005)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[TokenizerSandbox]:
    box = TokenizerSandbox(workers=2, time_limit_s=DEADLINE_S)
    yield box
    box.close()


def refused_while_ticking(sandbox: TokenizerSandbox, data: bytes, text: str) -> str:
    """The message for ``data`` on ``text``, with proof that this process kept running: the
    ticker counted while the worker ran, and the answer came by the deadline (a refusal or a
    kill, never the bomb's minutes)."""
    with Ticker() as ticker:
        began = ticker.count
        deadline = time.monotonic() + DEADLINE_S
        with pytest.raises(TokenizerError) as raised:
            sandbox.encode_text(data, text, deadline)
        answered = time.monotonic()
        ticks = ticker.count - began
        waited = answered - (deadline - DEADLINE_S)
    # The counter ran while this thread waited: a tokenizer that held the interpreter would
    # stop it from the call until it returned (a tick before the call began at most). A machine
    # busy with other tests only spaces the ticks out (in CI, 12 in 1.6 s; a pause of 2.4 s in
    # a 3.0 s wait), so any wait of half a second must have seen two.
    assert waited < 0.5 or ticks >= 2, (ticks, waited)
    assert answered <= deadline + 2.0  # the kill, and reading its exit status, come promptly
    return str(raised.value)


def test_the_regex_bomb_is_refused_before_it_runs(sandbox):
    message = refused_while_ticking(sandbox, REGEX_BOMB, BOMB_TEXT)
    assert "refused" in message and "(a+)+" in message and "repeats" in message


def test_the_normalizer_chain_is_refused_before_it_runs(sandbox):
    message = refused_while_ticking(sandbox, CHAIN_BOMB, "a" * 96)
    assert "refused" in message and "20 Replace steps" in message
    assert "1,048,576 times longer" in message  # 2**20


def test_the_sparse_id_bomb_is_refused_before_it_is_built(sandbox):
    message = refused_while_ticking(sandbox, SPARSE_BOMB, "a")
    assert "refused" in message and "2,147,483,647" in message and "2 tokens" in message


def test_a_regex_the_checks_let_through_is_killed_at_the_deadline(sandbox):
    """``(a|aa)+$`` repeats no repetition, so the shape check passes it, yet it backtracks at
    each of 20,000 start positions: the worker is killed at the deadline, and replaced."""
    slow = word_level({"[UNK]": 0, "a": 1}, pre_tokenizer=split_on("(a|aa)+$"))
    assert nested_repetition("(a|aa)+$") is None
    killed = sandbox.killed
    message = refused_while_ticking(sandbox, slow, BOMB_TEXT)
    assert "took longer than 3 s" in message and "stopped" in message
    assert sandbox.killed == killed + 1
    # A fresh worker answers the next request.
    normal = word_level({"[UNK]": 0, "a": 1, "b": 2}, pre_tokenizer={"type": "Whitespace"})
    assert [r.id for r in sandbox.encode_text(normal, "a b c").records] == [1, 2, 0]


@pytest.mark.slow
def test_a_file_that_asks_for_more_memory_than_a_worker_has_is_stopped():
    """Six doublings pass the checks (64 times longer is allowed) but 100,000 characters then
    need hundreds of MB: a worker limited to 300 MiB of address space fails, and says so."""
    box = TokenizerSandbox(workers=1, memory_bytes=300 * 2**20, time_limit_s=30)
    try:
        data = word_level({"[UNK]": 0, "a": 1}, normalizer=doubling(6))
        with Ticker() as ticker, pytest.raises(SandboxError) as raised:
            # (a limit past what the normaliser writes: the worker's memory is what stops it)
            box.encode_text(data, "a" * 100_000, with_replay=False, max_chars=10**7)
        assert ticker.count > 0
        assert "memory" in str(raised.value)
        assert [r.id for r in box.encode_text(data, "a").records] == [0]  # 64 a's: unknown
    finally:
        box.close()


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads Linux's /proc")
def test_a_worker_runs_under_its_memory_and_cpu_limits(sandbox):
    normal = word_level({"[UNK]": 0, "a": 1})
    sandbox.encode_text(normal, "a")
    for pid in sandbox.pids():
        limits = Path(f"/proc/{pid}/limits").read_text()
        address = next(line for line in limits.splitlines() if line.startswith("Max address"))
        assert str(sandbox.memory_bytes) in address.split()
        cpu = next(line for line in limits.splitlines() if line.startswith("Max cpu time"))
        assert cpu.split()[3] != "unlimited"  # the soft limit of this request
        # and torch is not loaded in a worker (a replacement starts in a fraction of a second)
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "libtorch" not in maps
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != sandbox.memory_bytes  # not this one


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b'{"model": {"vocab": {"a": ' + b"1" * 5_000 + b"}}}", ["integer", "5,000 digits"]),
        (b"[" * 100 + b"]" * 100, ["nests 100 levels"]),
        (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
        (word_level({"[UNK]": 0, "a": -1}), ["id -1", "not an integer"]),
        (word_level({"[UNK]": 0, "a": 2**40}), ["1,099,511,627,776", "not an integer"]),
        (word_level({"[UNK]": 0, "a": True}), ["id true"]),
        (
            word_level({"[UNK]": 0}, added_tokens=[{"id": 4_000_000, "content": "x"}]),
            ["largest id is 4,000,000"],
        ),
        (
            word_level({"a": 0}, normalizer={"type": "Sequence", "normalizers": [{}] * 70}),
            ["normalizer has 71 steps"],
        ),
        (
            word_level(
                {"a": 0},
                normalizer={
                    "type": "Replace",
                    "pattern": {"Regex": "a"},
                    "content": "x" * 100,
                },
            ),
            ["101 times longer"],
        ),
        (word_level({"a": 0}, pre_tokenizer=split_on(r"(\w*x)*y")), ["(\\\\w*x)*"]),
        (b"\xff\xfe", ["not UTF-8"]),
    ],
)
def test_the_checks_refuse_with_what_and_why(data, words):
    with pytest.raises(TokenizerError) as raised:
        check_tokenizer_json(data)
    message = str(raised.value)
    assert all(word in message for word in words), message


@pytest.mark.parametrize(
    ("pattern", "nested"),
    [
        ("(a+)+$", "(a+)+"),
        ("(?:a*b?)*", "(?:a*b?)*"),
        ("((ab)+c)+", "((ab)+c)+"),
        ("(x{2,})+", "(x{2,})+"),
        (r"(\p{L}+\s?){2,}", r"(\p{L}+\s?){2,}"),
        # GPT-2's, cl100k's and Llama-3's patterns repeat nothing that repeats
        (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", None),
        (
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
            r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            None,
        ),
        ("(a+)?", None),
        ("(ab){3}", None),
        (r"[(a+)]+", None),  # a character class, not a group
        (r"\(a+\)+", None),  # escaped parentheses
    ],
)
def test_nested_repetition_is_found_by_shape(pattern, nested):
    assert nested_repetition(pattern) == nested


@pytest.mark.parametrize(
    "name", ["gpt2", "bert-base-uncased", pytest.param("cl100k_base", marks=pytest.mark.slow)]
)
def test_a_real_tokenizer_passes_the_checks_and_gives_the_librarys_own_tokens(sandbox, name):
    """The same pieces, ids and offsets as `tokenizers` itself in this process (the reference),
    and the same replay as the in-process one."""
    data = load_real_tokenizer(name).to_json_str().encode("utf-8")
    reference = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    text = "Héllo wörld, the cat sat on the mat! 🤖 naïve café — 1234 tokens\n\tend"
    encoded = sandbox.encode_text(data, text, time.monotonic() + 60)
    expected = reference.encode(text)
    assert [r.piece for r in encoded.records] == expected.tokens
    assert [r.id for r in encoded.records] == expected.ids
    assert [(r.start, r.end) for r in encoded.records] == expected.offsets
    assert encoded.vocab_size == reference.get_vocab_size(with_added_tokens=True)
    assert encoded.replay is not None
    replayed = [p for word in encoded.replay for p in word.pieces]
    assert replayed == reference.encode(text, add_special_tokens=False).tokens


@pytest.mark.slow
def test_an_uploaded_file_on_the_tokenize_tab_matches_the_library(tmp_path):
    """Through the tab's handler: the token table of an upload is `tokenizers`' encoding."""
    from ui.serving import state
    from ui.tabs import tokenize as tab

    data = (ROOT / "assets/tokenizers/bert-base-uncased/tokenizer.json").read_bytes()
    path = tmp_path / "tokenizer.json"
    path.write_bytes(data)
    text = "The Transformer reads tokens, not words."
    registry = state.ModelRegistry("cpu")
    _, _, _, _, rows, replay = tab.tokenize(
        registry, text, "uploaded tokenizer.json", 400, str(path), "(none)", None
    )
    reference = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    reference.no_padding()  # the file pads to 128; the tab shows the text's own tokens
    expected = reference.encode(text)
    assert [row[1] for row in rows] == expected.tokens
    assert [row[2] for row in rows] == expected.ids
    assert "No replay" not in replay


def test_a_huge_integer_is_a_clear_refusal_in_process_too():
    """`Tokenizer.from_json_str` (a ``--model`` folder's file) refuses it by name as well,
    instead of Python's ValueError from ``json.loads``."""
    from transformer.text.tokenization import Tokenizer

    with pytest.raises(TokenizerError, match="integer too long"):
        Tokenizer.from_json_str('{"model": {"vocab": {"a": ' + "7" * 5_000 + "}}}")
