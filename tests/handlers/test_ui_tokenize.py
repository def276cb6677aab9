"""The Tokenize tab's handlers and wiring, each checked against a value computed here on its
own: tiktoken's and `tokenizers`' own encodings of the real tokenizers' files (from the pip
packages that ship them), a naive byte-pair merge loop over GPT-2's vocab.bpe, training at the
vocabulary slider's ends, the vocabulary file's characters, the Blocks config."""

from __future__ import annotations

import itertools
import json
import re
import unicodedata

import pytest
import tokenizers
import torch
from conftest import reference_file

from transformer.text.corpus import bundled_corpus
from transformer.text.real_tokenizers import REAL_TOKENIZERS
from transformer.text.tokenization import TokenizerError, train_tokenizer
from transformer.training.bundled import BUNDLED_DIR
from ui.serving.state import ModelRegistry
from ui.tabs import tokenize

GPT2 = REAL_TOKENIZERS["gpt2"].label
CL100K = REAL_TOKENIZERS["cl100k_base"].label
BERT = REAL_TOKENIZERS["bert-base-uncased"].label
LIVE = {
    "bpe": "BPE, trained live on the bundled corpus",
    "byte_bpe": "byte-level BPE (GPT-2 style), trained live",
    "wordpiece": "WordPiece (BERT style), trained live",
    "unigram": "Unigram (SentencePiece style), trained live",
}


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


def run(registry, text, choice, compare="(none)", vocab=500, step=1000):
    return tokenize.tokenize(registry, text, choice, vocab, None, compare, step)


# -- the real tokenizers -------------------------------------------------------------------------

TEXTS = [
    "Hello world, it's 2024!\n  def f(x): return x**2",
    "Ünïcödé, emoji 🤖 and 中文 all work",
    "naïve café — ‘quotes’ 12345678",
]


@pytest.mark.parametrize("name", ["gpt2", "cl100k_base"])
@pytest.mark.parametrize("text", TEXTS)
def test_byte_level_rows_are_tiktokens_tokens_read_as_text(
    registry, tiktoken_encodings, name, text
):
    encoding = tiktoken_encodings[name]
    stats, segments, _, _, rows, _ = run(registry, text, REAL_TOKENIZERS[name].label)
    ids = encoding.encode(text, allowed_special="all")
    assert [row[2] for row in rows] == ids
    assert f"**{len(ids)} tokens**" in stats
    for row, token_id in zip(rows, ids, strict=True):
        data = encoding.decode_single_token_bytes(token_id)
        try:
            expected = data.decode("utf-8")
        except UnicodeDecodeError:  # part of a character: its bytes are named
            assert "/" in row[7] and "bytes" in row[8]  # named, which of its bytes
            continue
        if not expected.strip():  # spaces and line breaks alone are drawn visibly
            expected = expected.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
        assert row[7] == expected  # "reads as"
        if expected.startswith(" "):
            assert "is a space" in row[8]
    # Each piece is drawn as what it reads as: whole characters join back into the text.
    drawn = "".join(segment for segment, _ in segments)
    if all("/" not in row[7] for row in rows):
        assert drawn.replace("␣", " ").replace("↵", "\n") == text
    if " " in text:
        assert "Ġ is a space" in stats


def test_bert_rows_are_the_tokenizers_librarys_own(registry):
    reference = tokenizers.Tokenizer.from_file(
        str(reference_file("bert-base-uncased/tokenizer.json"))
    )
    reference.no_padding()
    reference.no_truncation()
    for text in TEXTS:
        for choice in (BERT, "all-MiniLM-L6-v2 model's tokenizer"):
            _, _, _, _, rows, _ = run(registry, text, choice)
            encoding = reference.encode(text)
            assert [row[1] for row in rows] == encoding.tokens
            assert [row[2] for row in rows] == encoding.ids
            assert [(row[3], row[4]) for row in rows] == [tuple(o) for o in encoding.offsets]


def _naive_bpe(symbols: list[str], ranks: dict[tuple[str, str], int]) -> list[tuple[str, str, int]]:
    """Merge the lowest-ranked adjacent pair until none is left; the merges made, in order."""
    made = []
    while True:
        pairs = [(ranks.get((a, b)), i) for i, (a, b) in enumerate(itertools.pairwise(symbols))]
        pairs = [(r, i) for r, i in pairs if r is not None]
        if not pairs:
            return made
        rank, i = min(pairs)
        made.append((symbols[i], symbols[i + 1], rank))
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]


def test_the_gpt2_replay_merges_by_rank_as_vocab_bpe_says(registry):
    lines = reference_file("gpt2/vocab.bpe").read_text(encoding="utf-8").split("\n")
    merges = [tuple(line.split(" ")) for line in lines[1:] if line]
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    for word in (" lowering", " tokenization", " Transformers"):
        made = _naive_bpe(["Ġ", *word[1:]], ranks)
        *_, replay_md = run(registry, word, GPT2, step=len(made))
        left, right, rank = made[-1]
        shown = [s.replace("Ġ", "␣") for s in (left, right, left + right)]
        expected = f"merge {len(made)}/{len(made)}: `{shown[0]}` + `{shown[1]}` → `{shown[2]}`"
        assert f"{expected} (rank {rank:,})" in replay_md
        *_, first_md = run(registry, word, GPT2, step=1)
        a, b, r = made[0]
        assert f"merge 1/{len(made)}: `{a.replace('Ġ', '␣')}` + `{b}` → " in first_md
        assert f"(rank {r:,})" in first_md


def test_a_failing_replay_never_takes_the_token_view_down(registry, tmp_path):
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    word_level = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    word_level.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    word_level.save(str(path))
    stats, _, _, _, rows, replay_md = tokenize.tokenize(
        registry, "hello world", "uploaded tokenizer.json", 500, str(path), "(none)", 3
    )
    assert [row[2] for row in rows] == [1, 2] and "**2 tokens**" in stats
    assert replay_md.startswith("_No replay for this tokenizer")


# -- unknown characters --------------------------------------------------------------------------


def _listed(stats: str) -> list[str]:
    warning = next((line for line in stats.split("\n") if line.startswith("⚠️")), "")
    return re.findall(r"`(.)` \(U\+[0-9A-F]{4,6}\)", warning)


def test_the_unknown_message_lists_exactly_the_characters_not_in_the_vocabulary(registry):
    spec = json.loads((BUNDLED_DIR / "translate" / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    text = "a zebra ate ß, Ω and 🤖 quietly; Zzz"
    expected = [
        c
        for c in dict.fromkeys(text)
        if not c.isspace() and unicodedata.normalize("NFKC", c) not in vocab
    ]
    assert expected  # the example holds characters this vocabulary lacks
    stats, *_ = run(registry, text, "translate model's tokenizer (BPE)")
    assert _listed(stats) == expected
    clean, *_ = run(registry, "a big dog", "translate model's tokenizer (BPE)")
    assert "⚠️" not in clean


def test_wordpiece_unknown_words_name_their_unreadable_character(registry):
    stats, *_ = run(registry, "hello 🤖 wörld", BERT)
    assert _listed(stats) == ["🤖"]  # ö is read (accents are stripped), the robot is not
    stats_byte, *_ = run(registry, "hello 🤖", GPT2)  # byte-level reads everything
    assert "⚠️" not in stats_byte


# -- the vocabulary and step sliders -------------------------------------------------------------


@pytest.mark.parametrize("algorithm", list(LIVE))
def test_the_vocabulary_slider_spans_what_training_accepts(registry, algorithm):
    view = tokenize.tokenize_view(registry, "the cat", LIVE[algorithm], 500, None, "(none)")
    slider = view[6]
    low, high = slider["minimum"], slider["maximum"]
    assert slider["visible"] and low <= slider["value"] <= high
    corpus = bundled_corpus()
    assert train_tokenizer(corpus, algorithm, low).vocab_size == low  # the low end trains
    try:  # below it training refuses, or cannot honour the size
        below = train_tokenizer(corpus, algorithm, low - 1).vocab_size
    except TokenizerError:
        below = None
    assert below != low - 1
    top = train_tokenizer(corpus, algorithm, high)
    assert top.vocab_size == high  # the high end is reached ...
    more = train_tokenizer(corpus, algorithm, high + 50)
    assert more.to_json_str() == top.to_json_str()  # ... and nothing changes past it
    assert f"{high:,}" in slider["info"]


def test_the_vocabulary_slider_hides_for_fixed_vocabularies(registry):
    view = tokenize.tokenize_view(registry, "the cat", GPT2, 500, None, "(none)")
    assert view[6]["visible"] is False
    assert view[8]["visible"] is False  # the upload box shows only for "uploaded tokenizer.json"
    upload = tokenize.tokenize_view(registry, "", "uploaded tokenizer.json", 500, None, "(none)")
    assert upload[8]["visible"] is True
    shown = tokenize.tokenize_view(registry, "the cat", GPT2, 500, None, LIVE["unigram"])
    assert shown[6]["visible"] and shown[6]["minimum"] == tokenize.VOCAB_RANGE["unigram"][0]


def test_the_view_sets_an_empty_upload_box_only_to_clear_a_file(registry, tmp_path):
    """Setting the box fires its change event, one of the view's own triggers: a view that set
    an empty box on every draw ran twice on every page (measured in the browser: two runs on
    load, one after this change). A file left from "uploaded" is still cleared."""
    view = tokenize.tokenize_view(registry, "the cat", GPT2, 500, None, "(none)")
    assert "value" not in view[8]
    left = tmp_path / "tokenizer.json"
    left.write_text("{}")
    view = tokenize.tokenize_view(registry, "the cat", GPT2, 500, str(left), "(none)")
    assert view[8]["value"] is None and view[8]["visible"] is False


def test_a_size_outside_the_range_is_moved_into_it_and_said(registry):
    stats, *_ = run(registry, "the cat", LIVE["wordpiece"], vocab=60)
    low = tokenize.VOCAB_RANGE["wordpiece"][0]
    assert f"vocabulary {low}" in stats and "60 asked" in stats


def test_the_step_slider_ends_at_the_texts_most_steps(registry):
    text = "the transformer attends to unbelievably long words"
    view = tokenize.tokenize_view(registry, text, LIVE["bpe"], 300, None, "(none)")
    backend = tokenize.corpus_tokenizer("bpe", 300).backend
    words = backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))
    # every BPE merge joins two symbols into one: merges = characters - pieces
    expected = max(len(word) - len(backend.model.tokenize(word)) for word, _ in words)
    assert view[7]["maximum"] == expected and view[7]["value"] == expected


# -- wiring --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_config():
    from ui.demo import build_demo

    demo = build_demo("cpu", preload=False)
    config = demo.get_config_file()
    return demo, config, {c["id"]: c for c in config["components"]}


def test_examples_run_on_click_and_keep_line_breaks(demo_config, registry):
    demo, config, components = demo_config
    (dependency,) = [
        d
        for d in config["dependencies"]
        if getattr(demo.fns[d["id"]].fn, "__name__", None) == "run_example"
    ]
    labels = [components[o]["props"].get("label") for o in dependency["outputs"]]
    assert "Tokens" in labels and "Tokens, ids and character offsets" in labels
    dataset = next(
        c
        for c in components.values()
        if c["type"] == "dataset" and "Examples for a lecture" in str(c["props"].get("label"))
    )
    samples = dataset["props"]["samples"]
    assert any("\n" in str(sample[0]) for sample in samples)  # line breaks kept
    text, choice, compare = samples[3]
    result = demo.fns[dependency["id"]].fn(text, choice, compare)
    assert result[:6] == run(registry, text, choice, compare, step=result[7]["value"])


def test_the_view_draws_on_open_and_on_every_control(demo_config):
    demo, config, components = demo_config
    (dependency,) = [
        d
        for d in config["dependencies"]
        if getattr(demo.fns[d["id"]].fn, "__name__", None) == "tokenize_view"
    ]
    targets = {
        (components.get(t[0], {}).get("props", {}).get("label"), t[1])
        for t in dependency["targets"]
    }
    assert any(event == "load" for _, event in targets)
    for label in ("Text", "Tokenizer", "Compare side by side with"):
        assert any(name == label for name, _ in targets), label
    assert any(str(name).startswith("Vocabulary size") for name, _ in targets)


def test_every_token_is_one_chip_and_an_unreadable_character_is_red(registry):
    """Translate's tokenizer counted 29 tokens but drew 28 chips; the "T" it
    cannot read was a blue chip and its word-start marker ▁ read as "T"."""
    tokenizer = registry.checkpoint("translate", None).tokenizer
    text = "The transformer attends to every token."
    backend = tokenizer.backend.encode(text)  # the library's own tokens: the reference
    stats, segments, _, _, rows, _ = run(registry, text, "translate model's tokenizer (BPE)")
    chips = [segment for segment in segments if segment[1] is not None]
    assert f"**{len(backend.ids)} tokens**" in stats
    assert len(chips) == len(backend.ids)
    unk = tokenizer.unk_id
    for (piece, label), token_id, (start, end) in zip(
        chips, backend.ids, backend.offsets, strict=True
    ):
        if token_id == unk:
            assert label == "unknown" and piece == text[start:end]
    marker_rows = [row for row in rows if row[1] == "▁"]
    assert marker_rows and all(row[7] == "␣" for row in marker_rows)


def test_a_text_without_replay_steps_hides_the_step_slider(registry):
    view = tokenize.tokenize_view(registry, "the cat", CL100K, 500, None, "(none)")
    assert view[7]["visible"] is False
    view = tokenize.tokenize_view(registry, "the transformer", LIVE["bpe"], 300, None, "(none)")
    assert view[7]["visible"] is True and view[7]["maximum"] >= 1


@pytest.mark.parametrize("choice", [GPT2, LIVE["bpe"], LIVE["unigram"]])
def test_a_long_view_draws_its_first_tokens_and_symbols_and_counts_the_rest(
    registry, monkeypatch, choice
):
    """20,000 emoji were 52,000 chips and one word of 80,000 byte symbols in the
    replay, 6.5 MB as sent; what is drawn is bounded, and what is left out is counted."""
    from ui.tabs.tokenize import replay_view, views

    monkeypatch.setattr(views, "MAX_CHIPS", 5)
    monkeypatch.setattr(replay_view, "REPLAY_SYMBOLS", 4)
    text = "zxqvtransformerificationzxqv and the cat sat on the mat"
    stats, segments, _, _, rows, replay = run(registry, text, choice, step=0)
    n_tokens = int(re.search(r"\*\*([\d,]+) tokens\*\*", stats)[1].replace(",", ""))
    assert n_tokens > 5 and len(rows) == n_tokens
    assert len([s for s in segments if s[1] is not None]) == 5
    assert segments[-1] == (
        f" … {n_tokens - 5} more tokens, not drawn (the first 5 are; the line above counts "
        "them all)",
        None,
    )
    first_line = replay.split("\n\n")[1 if choice == GPT2 else 0]
    assert first_line.count(" … ") >= 1 and re.search(r"… \d+ more", first_line), first_line


def test_building_a_real_vocabulary_has_its_own_limit_and_the_text_keeps_its_own(
    registry, monkeypatch
):
    """Building GPT-4's vocabulary (once per server, seconds on a busy one) is not the text's
    work: a build longer than the text's limit still answers, and one longer than its own
    limit is refused with a message that says so."""
    import threading
    import time

    from ui.serving import limits
    from ui.tabs.tokenize import choices

    built = choices.load_real_tokenizer("gpt2")
    run(registry, "Hello world", GPT2)  # the view's own first-call work, done before timing
    # The build ends when the test says so, not after a sleep: a loaded machine that paused the
    # request's thread for longer than the sleep found the build done and answered.
    ended = threading.Event()
    ended.set()

    def slow_build(name):
        time.sleep(0.6)
        ended.wait(30)
        return built

    monkeypatch.setattr(choices, "load_real_tokenizer", slow_build)
    monkeypatch.setattr(limits, "TOKENIZER_TIME_LIMIT_S", 0.4)
    _, chips, *_ = run(registry, "Hello world", GPT2)
    assert [text for text, _ in chips] == ["Hello", " world"]  # GPT-2 reads two pieces
    ended.clear()
    monkeypatch.setattr(limits, "TOKENIZER_BUILD_LIMIT_S", 0.2)
    try:
        with pytest.raises(Exception, match="building this tokenizer's vocabulary"):
            run(registry, "Hello again", GPT2)
    finally:
        ended.set()
