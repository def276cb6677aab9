"""Every tab's handlers, called directly (no server): each result is checked against a value the
test computes on its own (the tokenizers library, the sin/cos formula, a fresh forward pass,
parameter tensors counted by storage)."""

from __future__ import annotations

import itertools
import math

import gradio as gr
import numpy as np
import pytest
import tokenizers
import torch

from transformer.core.run import TRACE
from transformer.training.bundled import BUNDLED_DIR
from ui.serving import limits
from ui.serving.state import TRAINED_HERE, GenerationState, ModelRegistry, SessionModels
from ui.tabs import attention, generate, positions, tokenize, training

CROSS = "cross-attention (decoder → encoder)"
ENCODER_SELF = "encoder self-attention"
DECODER_SELF = "decoder masked self-attention"
# source, model, strategy, temperature, top-k, top-p, beam, max tokens, seed
GREEDY = ["the small cat sees a red ball", "translate", "greedy", 1.0, 0, 1.0, 3, 40, 0]


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    return ModelRegistry(torch.device("cpu"))


# -- tokenize ----------------------------------------------------------------------------------


def test_tokenize_table_is_the_tokenizers_librarys_own_encoding(registry):
    text = "a big dog sleeps under the old table"
    stats, segments, stats_b, segments_b, rows, replay_md = tokenize.tokenize(
        registry, text, "translate model's tokenizer (BPE)", 500, None, "(none)", 30
    )
    reference = tokenizers.Tokenizer.from_file(str(BUNDLED_DIR / "translate" / "tokenizer.json"))
    encoding = reference.encode(text)
    assert [row[2] for row in rows] == encoding.ids
    assert [row[1] for row in rows] == encoding.tokens
    assert [(row[3], row[4]) for row in rows] == encoding.offsets
    assert f"**{len(encoding.ids)} tokens**" in stats
    # The highlighted segments cover the text exactly once; no comparison was asked for.
    # (SentencePiece's word-start marker ▁, a token of its own, is a chip of its own too)
    assert "".join(piece for piece, _ in segments if piece != "▁") == text
    assert stats_b == "" and segments_b == []
    # The replay ends, word by word, at the library's pieces.
    assert "**`▁big`** → " + " ".join(f"`{t}`" for t in encoding.tokens[1:4]) in replay_md


def test_tokenize_compares_two_tokenizers_trained_live(registry):
    text = "unbelievably tokenization-friendly"
    _, _, stats_b, segments_b, _rows, _ = tokenize.tokenize(
        registry,
        text,
        "BPE, trained live on the bundled corpus",
        300,
        None,
        "WordPiece (BERT style), trained live",
        0,
    )
    wordpiece = tokenize.corpus_tokenizer("wordpiece", 300)
    reference = tokenizers.Tokenizer.from_str(wordpiece.backend.to_str())
    assert f"**{len(reference.encode(text).ids)} tokens**" in stats_b
    assert "wordpiece" in stats_b and segments_b


def test_tokenize_refuses_text_past_the_limit_and_big_uploads(registry, tmp_path, monkeypatch):
    with pytest.raises(gr.Error, match="longer than"):
        tokenize.tokenize(registry, "a" * (limits.MAX_TEXT + 1), "BPE, trained live on the bundled corpus", 500, None, "(none)", 0)  # fmt: skip
    upload = tmp_path / "tokenizer.json"
    upload.write_text("{}" + " " * 2000)
    monkeypatch.setattr(limits, "MAX_UPLOAD_BYTES", 1000)
    with pytest.raises(gr.Error, match="larger than the limit of 1,000 bytes"):
        tokenize.tokenize(registry, "ab", "uploaded tokenizer.json", 500, str(upload), "(none)", 0)


def test_learn_bpe_first_merge_is_the_most_frequent_pair():
    corpus = "ab ab ab cd\nab cd"
    summary, rows = tokenize.learn(corpus, 1, "abcd")
    assert len(rows) == 1
    # Count adjacent character pairs inside words, as BPE does (a word-start marker aside).
    counts: dict[tuple[str, str], int] = {}
    for word in corpus.split():
        for pair in itertools.pairwise(word):
            counts[pair] = counts.get(pair, 0) + 1
    best = max(counts, key=counts.get)
    assert rows[0][0] == 1 and rows[0][1] == f"{best[0]} + {best[1]}" and rows[0][3] == 4
    assert "After **1** of" in summary


# -- embeddings & positions --------------------------------------------------------------------


def test_positional_encoding_is_the_papers_formula():
    heatmap, curves, similarity = positions.positional(16, 10, 10000, "0, 3", "cosine", False)
    z = np.asarray(heatmap.data[0].z, dtype=np.float64)
    expected = np.empty((10, 16))
    for pos in range(10):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            expected[pos, 2 * i] = math.sin(angle)
            expected[pos, 2 * i + 1] = math.cos(angle)
    np.testing.assert_allclose(z, expected, atol=1e-6)
    # The curves are the chosen columns; cosine similarity of a position with itself is 1.
    np.testing.assert_allclose(np.asarray(curves.data[1].y), expected[:, 3], atol=1e-6)
    sim = np.asarray(similarity.data[0].z, dtype=np.float64)
    np.testing.assert_allclose(np.diag(sim), np.ones(10), atol=1e-5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((15, 10, 10000, "0"), "d_model must be even"),
        ((16, 10, 10000, "0, 16"), "between 0 and 15"),
        ((16, 10, 10000, "x"), "whole numbers"),
        ((16, 10, float("nan"), "0"), "base must be"),
    ],
)
def test_positional_encoding_bad_input_is_a_message(args, message):
    with pytest.raises(gr.Error, match=message):
        positions.positional(*args, "cosine", False)


def test_embeddings_are_the_scaled_lookup_plus_the_encoding(registry):
    sentence = "the small cat sees a red ball"
    summed, _norms = positions.embeddings(registry, sentence, "translate", False, SessionModels())
    checkpoint = registry.checkpoint("translate", None)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    ids = torch.tensor(tokenizer.encode_ids(sentence))
    d = model.config.d_model
    table = model.src_embedding.lookup.weight.detach()[ids] * math.sqrt(d)
    angles = torch.arange(len(ids))[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(len(ids), d)
    shown = [np.asarray(trace.z, dtype=np.float64) for trace in summed.data if trace.z is not None]
    np.testing.assert_allclose(shown[-1], (table + pe).numpy(), atol=1e-4)


# -- attention ---------------------------------------------------------------------------------


def test_attention_draws_the_chosen_layer_and_head(registry):
    sentence = "the small cat sees a red ball"
    single, _masks, diff, summary = attention.attention(
        registry, sentence, "translate", ENCODER_SELF, 2, 3, 1, [], False, SessionModels()
    )
    checkpoint = registry.checkpoint("translate", None)
    src = torch.tensor([checkpoint.tokenizer.encode_ids(sentence)])
    with torch.no_grad():
        trace = checkpoint.model(src, src[:, :1] * 0 + checkpoint.tokenizer.bos_id, call=TRACE)
    expected = trace.encoder_layers[1].self_attention.weights[0, 2].numpy()  # layer 2, head 3
    np.testing.assert_allclose(np.asarray(single.data[1].z, dtype=np.float64), expected, atol=1e-5)
    assert "Tick a what-if switch" in str(diff.layout)
    assert "Sentence 1" in summary


def test_attention_masks_show_the_padding_of_the_shorter_sentence(registry):
    sentences = ["the small cat sees a red ball", "a big dog"]
    _, masks, _, summary = attention.attention(
        registry, "\n".join(sentences), "translate", ENCODER_SELF, 1, 1, 2, [], False, None
    )
    tokenizer = registry.checkpoint("translate", None).tokenizer
    lengths = [len(tokenizer.encode_ids(s)) for s in sentences]
    key_row = np.asarray(masks.data[0].z, dtype=np.float64)
    # The padding-mask panel: one row over the keys, real keys first, the padded tail masked.
    real = np.isfinite(key_row[0]) & (key_row[0] > 0)
    assert real.tolist() == [True] * lengths[1] + [False] * (max(lengths) - lengths[1])
    assert "Padding is real here" in summary and "sentence 2 is padded" in summary
    # The longest sentence has no padding: the summary must not claim any.
    _, _, _, summary = attention.attention(
        registry, "\n".join(sentences), "translate", ENCODER_SELF, 1, 1, 1, [], False, None
    )
    assert "Padding is real here" not in summary


def test_attention_what_if_causal_mask_off_lets_the_decoder_see_the_future(registry):
    _, _, diff, summary = attention.attention(
        registry,
        "the teacher sees",
        "continue",
        DECODER_SELF,
        1,
        1,
        1,
        ["causal mask off"],
        False,
        None,
    )
    change = np.asarray(diff.data[-1].z, dtype=np.float64)
    upper = np.triu_indices(change.shape[0], k=1)
    assert np.nanmax(np.abs(change[upper])) > 0  # weight moved onto future keys
    assert "What-if (causal mask off)" in summary


def test_attention_bad_choices_are_messages(registry):
    with pytest.raises(gr.Error, match="has no cross-attention"):
        attention.attention(registry, "a b", "continue", CROSS, 1, 1, 1, [], False, None)
    with pytest.raises(gr.Error, match="no model has been trained"):
        attention.attention(registry, "a b", TRAINED_HERE, CROSS, 1, 1, 1, [], False, None)


# -- generate ----------------------------------------------------------------------------------


def _model_argmax(registry, source: str, prefix: list[int]) -> int:
    checkpoint = registry.checkpoint("translate", None)
    src = torch.tensor([checkpoint.tokenizer.encode_ids(source)])
    with torch.no_grad():
        logits = checkpoint.model(src, torch.tensor([[checkpoint.tokenizer.bos_id, *prefix]]))
    return int(logits[0, -1].argmax())


def test_generate_step_chooses_the_argmax_of_the_models_logits(registry):
    state = GenerationState()
    session = SessionModels()
    tokenizer = registry.checkpoint("translate", None).tokenizer
    chosen: list[int] = []
    for _ in range(3):
        summary, _top, _cross, _triangle, _lens, _norms, state = generate.step(
            registry, *GREEDY, 1, 1, False, session, state
        )
        chosen.append(state.decoding.output_ids[-1])
    expected: list[int] = []
    for _ in range(3):
        expected.append(_model_argmax(registry, GREEDY[0], expected))
    assert chosen == expected
    assert f"`{tokenizer.decode(expected)}`" in summary and "(3 steps)" in summary


def test_generate_back_undoes_a_step_and_reset_starts_again(registry):
    session = SessionModels()
    first, *_, state = generate.step(registry, *GREEDY, 1, 1, False, session, GenerationState())
    second, *_, state = generate.step(registry, *GREEDY, 1, 1, False, session, state)
    back, *_, state = generate.back(registry, *GREEDY, 1, 1, False, session, state)
    assert back == first != second
    reset, *_, state = generate.reset(registry, *GREEDY, 1, 1, False, session, state)
    assert "Press **Step**" in reset and not state.decoding.records


def test_generate_run_streams_to_the_end(registry):
    updates = list(generate.run(registry, *GREEDY, 1, 1, False, SessionModels(), None))
    assert len(updates) == len(updates[-1][-1].decoding.records) > 3
    assert "**Finished** (eos)" in updates[-1][0]


def test_teacher_forcing_matches_the_models_argmax(registry):
    reference = "le minou petol voitte une ballette rougin"
    text, rows = generate.force(registry, GREEDY[0], "translate", reference, SessionModels())
    tokenizer = registry.checkpoint("translate", None).tokenizer
    ids = tokenizer.encode_ids(reference, add_eos=True)
    predicted = [_model_argmax(registry, GREEDY[0], ids[:i]) for i in range(len(ids))]
    assert [row[3] for row in rows] == [tokenizer.id_to_token(i) for i in predicted]
    assert [row[1] for row in rows] == [tokenizer.id_to_token(i) for i in ids]
    share = sum(p == r for p, r in zip(predicted, ids, strict=True)) / len(ids)
    assert f"**{share:.0%}**" in text


def test_generate_bad_input_is_a_message(registry):
    with pytest.raises(gr.Error, match="enter a source sentence"):
        generate.step(registry, "", *GREEDY[1:], 1, 1, False, SessionModels(), None)
    with pytest.raises(gr.Error, match="enter both a source"):
        generate.force(registry, "the teacher", "continue", " ", SessionModels())


# -- model & training --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["translate", "continue"])
def test_model_info_counts_each_tied_tensor_once(registry, name):
    text, rows, config_rows = training.model_info(registry, name, SessionModels())
    model = registry.checkpoint(name, None).model
    by_storage = {}
    for _, tensor in model.named_parameters(remove_duplicate=False):
        by_storage[tensor.data_ptr()] = tensor.numel()
    table = {label: int(count.replace(",", "")) for label, count in rows}
    assert table["total"] == sum(by_storage.values())
    assert sum(n for label, n in table.items() if label != "total") == table["total"]
    assert ["d_model", str(model.config.d_model)] in config_rows
    assert "63,119,496" in text


@pytest.mark.slow  # a real training run
def test_training_live_fills_the_session_and_its_snapshots(registry):
    session = SessionModels()
    updates = list(training.run_training(registry, "reverse", 20, 0, False, session))
    final, curves, session = updates[-1]
    assert max(curves.data[0].x) == 20  # the loss curve reaches the last step
    assert "Done: 20 steps" in final and session.trained is not None
    assert session.trained.task == "reverse" and sorted(session.snapshots)[-1] == 20
    assert any("step 20/20" in u[0] for u in updates[:-1])
    grid = training.snapshot_view(registry, 0, "a b c", False, session)
    first = sorted(session.snapshots)[0]
    assert f"Snapshot at step {first} of training" in grid.layout.title.text
    # The session's own model answers the other tabs.
    assert training.model_info(registry, TRAINED_HERE, session)[1]


def test_snapshot_before_training_and_unknown_task_are_messages(registry):
    hint = training.snapshot_view(registry, 0, "a b", False, SessionModels())
    assert not hint.data and "train a model" in hint.layout.annotations[0].text
    with pytest.raises(gr.Error, match="unknown task"):
        list(training.run_training(registry, "poetry", 20, 0, False, SessionModels()))


def test_progress_line_fills_the_bar_in_proportion():
    line = training.progress_line(15, 30, 1.23456, 1234.4)
    assert line.startswith("`" + "█" * 15 + "░" * 15 + "`")
    assert "step 15/30 · loss 1.235 · 1,234 tokens/s" in line
