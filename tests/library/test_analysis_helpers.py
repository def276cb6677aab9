"""transformer.lab.analysis: the what-if switches by name, axis labels and key padding of a view,
reference targets, decoding from text and parameters per component."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import SMALL_HEADS, hf_greedy

import transformer
from transformer import (
    Intervention,
    ModelConfig,
    Transformer,
    analyse,
)
from transformer.generation import DecodingSettings, teacher_force
from transformer.lab.analysis import decoding_ids
from transformer.training.bundled import load_bundled


@pytest.fixture(scope="module")
def bundled():
    return load_bundled("cpu").models


@pytest.mark.parametrize(
    ("switch", "expected"),
    [
        ("causal mask off", Intervention(causal_mask=False)),
        ("padding mask off", Intervention(padding_mask=False)),
        ("no √d scaling", Intervention(scale_scores=False)),
        ("no positional encoding", Intervention(positional_encoding=False)),
        ("zero this head", Intervention(zero_heads=frozenset({("cross", 1, 2)}))),
    ],
)
def test_each_what_if_name_sets_its_own_field(switch, expected):
    assert transformer.what_if([switch], head=("cross", 1, 2)) == expected


def test_what_ifs_combine_and_none_is_the_plain_pass():
    assert transformer.what_if([]) == Intervention()
    both = transformer.what_if(["causal mask off", "no √d scaling"])
    assert both == Intervention(causal_mask=False, scale_scores=False)


def test_unknown_what_if_and_a_head_switch_without_a_head_are_refused():
    with pytest.raises(ValueError, match="unknown what-if"):
        transformer.what_if(["mask everything"])
    with pytest.raises(ValueError, match="needs the"):
        transformer.what_if(["zero this head"])


def test_axis_pieces_and_key_padding_follow_the_kind(bundled):
    checkpoint = bundled["translate"]
    sentences = ["the small cat sees a red ball", "a dog"]
    analysis = analyse(checkpoint.model, checkpoint.tokenizer, sentences)
    source = [checkpoint.tokenizer.encode_ids(s) for s in sentences]
    q, k = transformer.axis_pieces(analysis, "cross")
    assert q is analysis.target_pieces and k is analysis.source_pieces
    q, k = transformer.axis_pieces(analysis, "encoder_self")
    assert q is k is analysis.source_pieces
    q, k = transformer.axis_pieces(analysis, "decoder_self")
    assert q is k is analysis.target_pieces
    longest = max(len(ids) for ids in source)
    expected = [True] * len(source[1]) + [False] * (longest - len(source[1]))
    assert transformer.real_keys(analysis.trace, "cross", 1).tolist() == expected
    assert transformer.real_keys(analysis.trace, "encoder_self", 1).tolist() == expected
    target = analysis.trace.target.tokens[1]
    assert (
        transformer.real_keys(analysis.trace, "decoder_self", 1).tolist() == (target != 0).tolist()
    )


def test_reference_targets_are_bos_plus_the_tasks_answer(bundled):
    tokenizer = bundled["reverse"].tokenizer
    targets = transformer.reference_targets(tokenizer, "reverse", ["a b c", "d e"], pad_id=0)
    expected_rows = [
        [tokenizer.bos_id, *tokenizer.encode_ids("c b a")],
        [tokenizer.bos_id, *tokenizer.encode_ids("e d")],
    ]
    width = max(map(len, expected_rows))
    expected = torch.tensor([row + [0] * (width - len(row)) for row in expected_rows])
    assert torch.equal(targets, expected)
    assert transformer.reference_targets(tokenizer, None, ["a b"], pad_id=0) is None


def test_prompt_ids_add_bos_only_for_a_decoder_only_model(bundled):
    translate, cont = bundled["translate"], bundled["continue"]
    assert transformer.prompt_ids(translate.model, translate.tokenizer, "the cat") == (
        translate.tokenizer.encode_ids("the cat")
    )
    ids = transformer.prompt_ids(cont.model, cont.tokenizer, "the teacher")
    assert ids == [cont.tokenizer.bos_id, *cont.tokenizer.encode_ids("the teacher")]
    with pytest.raises(ValueError, match="enter a source"):
        transformer.prompt_ids(cont.model, cont.tokenizer, "  ")


def test_start_decoding_steps_the_models_greedy_choice(bundled):
    checkpoint = bundled["translate"]
    tokenizer, model = checkpoint.tokenizer, checkpoint.model
    session, pieces = transformer.start_decoding(
        model, tokenizer, "the small cat", DecodingSettings()
    )
    assert pieces == [tokenizer.id_to_token(i) for i in tokenizer.encode_ids("the small cat")]
    record = session.step()
    src = torch.tensor([tokenizer.encode_ids("the small cat")])
    with torch.no_grad():
        logits = model(src, torch.tensor([[tokenizer.bos_id]]))
    assert record.chosen_id == int(logits[0, -1].argmax())


@pytest.mark.parametrize("tie", [True, False])
def test_parameter_groups_count_tied_tensors_once(tie):
    config = SMALL_HEADS.replace(n_encoder_layers=1, n_decoder_layers=1, tie_embeddings=tie)
    model = Transformer(config)
    groups = transformer.parameter_groups(model)
    storages = {p.data_ptr(): p.numel() for _, p in model.named_parameters(remove_duplicate=False)}
    assert groups["total"] == sum(storages.values())
    assert sum(n for label, n in groups.items() if label != "total") == groups["total"]
    embeddings = "token embeddings (shared)" if tie else "token embeddings"
    n_lookup = 50 * 16
    assert groups[embeddings] == (n_lookup if tie else 2 * n_lookup)
    assert groups["generator"] == (50 if tie else n_lookup + 50)  # the bias (+ the projection)


def test_the_new_names_are_exported():
    for name in ["what_if", "parameter_groups", "LiveTraining", "snapshot_checkpoint"]:
        assert name in transformer.__all__ and getattr(transformer, name)


# -- start_decoding starts and stops where each family does ---------------------------------------


def _started(hf_models, family: str, text: str, new_tokens: int):
    """``start_decoding`` on the tiny ``family`` model, run to the end: (session, pieces,
    tokenizer, config.json)."""
    import json

    checkpoint = transformer.load_pretrained(hf_models[family])
    tokenizer, settings = checkpoint.tokenizer, DecodingSettings(max_new_tokens=new_tokens)
    session, pieces = transformer.start_decoding(checkpoint.model, tokenizer, text, settings)
    for _ in session.run():
        pass
    return session, pieces, tokenizer, json.loads((hf_models[family] / "config.json").read_text())


def test_start_decoding_a_marian_model_decodes_as_transformers_generate(hf_models):
    transformers = pytest.importorskip("transformers")
    text = "w7 w23 w61 w4"
    session, pieces, tokenizer, hf = _started(hf_models, "marian", text, 12)
    # Marian's tokenizer ends every source with </s>; the decoder starts from its own start id.
    source = [*tokenizer.encode_ids(text), hf["eos_token_id"]]
    assert session.source == source and pieces[-1] == "</s>"
    assert session.prefix == [hf["decoder_start_token_id"]]
    assert session.eos_id == hf["eos_token_id"]
    reference = transformers.MarianMTModel.from_pretrained(hf_models["marian"]).eval()
    banned = [[hf["pad_token_id"]]]  # our decoding never writes padding
    assert session.tokens == hf_greedy(reference, source, 12, bad_words_ids=banned)


def test_start_decoding_a_gpt2_model_continues_from_end_of_text(hf_models):
    transformers = pytest.importorskip("transformers")
    text = "w5 w17 w42"
    session, pieces, tokenizer, hf = _started(hf_models, "gpt2", text, 10)
    prompt = [hf["bos_token_id"], *tokenizer.encode_ids(text)]
    assert session.source == prompt and pieces[0] == "<|endoftext|>"
    assert session.eos_id == hf["eos_token_id"]
    reference = transformers.GPT2LMHeadModel.from_pretrained(hf_models["gpt2"]).eval()
    assert session.tokens == hf_greedy(reference, prompt, 10, pad_token_id=hf["eos_token_id"])


def test_an_encoder_decoder_model_without_a_first_id_is_refused_not_started_from_0(hf_models):
    """Marian names its decoder's first id in config.json and its tokenizer has no [BOS]: without
    the model's own, nothing says where the decoder starts, so decoding and teacher forcing
    refuse rather than guess an id."""
    checkpoint = transformer.load_pretrained(hf_models["marian"])
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    assert tokenizer.bos_id is None and model.config.decoder_start_id is not None
    ids, start, end = decoding_ids(model, tokenizer, "w5 w9")
    assert (start, end) == (model.config.decoder_start_id, model.config.eos_id)
    model.config = replace(model.config, decoder_start_id=None)
    with pytest.raises(ValueError, match="decoder's first id"):
        decoding_ids(model, tokenizer, "w5 w9")
    with pytest.raises(ValueError, match="needs bos_id"):
        teacher_force(model, ids, [5, 9], bos_id=None)


def test_a_decoder_only_model_is_taught_from_its_prompt_whatever_the_first_id(hf_models):
    """A decoder-only model never reads a first decoder id: teacher forcing with none gives what
    it gives with any."""
    checkpoint = transformer.load_pretrained(hf_models["gpt2"])
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    ids, _start, _end = decoding_ids(model, tokenizer, "w5 w9")
    without = teacher_force(model, ids, [7, 11, 3], bos_id=None)
    with_one = teacher_force(model, ids, [7, 11, 3], bos_id=42)
    assert [p.predicted_id for p in without.positions] == [
        p.predicted_id for p in with_one.positions
    ]
    assert without.mean_log_prob == pytest.approx(with_one.mean_log_prob)


def test_start_decoding_refuses_an_encoder_only_model(hf_models):
    checkpoint = transformer.load_pretrained(hf_models["bert"])
    with pytest.raises(ValueError, match="no decoder"):
        transformer.start_decoding(checkpoint.model, checkpoint.tokenizer, "w5", DecodingSettings())


def test_a_sentence_s_attention_holds_its_records_pieces_padding_and_legend(bundled):
    from transformer.lab.analysis import sentence_attention

    checkpoint = bundled["translate"]
    tokenizer = checkpoint.tokenizer
    sentences = ["the small cat sees a red ball", "a dog"]
    analysis = analyse(checkpoint.model, tokenizer, sentences)
    trace = analysis.trace
    at = sentence_attention(analysis, tokenizer, "cross", 1)
    # The records are the decoder layers' own cross-attention, in layer order.
    assert len(at.records) == len(trace.decoder_layers) and all(
        r is layer.cross_attention
        for r, layer in zip(at.records, trace.decoder_layers, strict=True)
    )
    # Queries: the answer's ids as the tokenizer writes them; keys: the source's, padded.
    target_ids = trace.target.tokens[1].tolist()
    assert at.queries == [tokenizer.id_to_token(i) for i in target_ids]
    source = tokenizer.encode_ids(sentences[1])
    longest = max(len(tokenizer.encode_ids(s)) for s in sentences)
    assert at.keys[: len(source)] == [tokenizer.id_to_token(i) for i in source]
    assert at.real_keys.tolist() == [True] * len(source) + [False] * (longest - len(source))
    assert at.shown_queries == at.queries and at.legend == ""  # no byte-level marks here
    # The [PAD] query rows: the answer's trailing pad ids (its first id may be any).
    pads = [i == checkpoint.config.pad_id for i in target_ids]
    trailing = [all(pads[j:]) and j > 0 for j in range(len(pads))]
    assert at.padded_queries.tolist() == trailing
    with pytest.raises(ValueError, match="no cross attention"):
        sentence_attention(
            analyse(bundled["continue"].model, tokenizer, ["a"]), tokenizer, "cross", 0
        )


def test_a_byte_level_sentence_s_legend_names_the_marks_it_shows():
    """Checked against the ``tokenizers`` library's own byte-level decoder."""
    from tokenizers import decoders

    from transformer.lab.analysis import sentence_attention
    from transformer.text.tokenization import train_tokenizer

    text = "the cat\xa0sat on the mat"
    tokenizer = train_tokenizer([text, "the cat sat", "on the mat"] * 5, "byte_bpe", 300)
    config = ModelConfig(
        architecture="decoder-only",
        n_encoder_layers=0,
        n_decoder_layers=1,
        d_model=16,
        n_heads=2,
        d_ff=32,
        src_vocab_size=tokenizer.vocab_size,
        tgt_vocab_size=tokenizer.vocab_size,
    )
    model = Transformer(config)
    at = sentence_attention(analyse(model, tokenizer, [text]), tokenizer, "decoder_self", 0)
    marks = {" ": "␣", "\xa0": "⍽"}
    reader = decoders.ByteLevel()
    expected = ["".join(marks.get(c, c) for c in reader.decode([p])) for p in at.queries]
    special = {tokenizer.id_to_token(i) for i in tokenizer.special_ids}
    pairs = zip(at.shown_queries, expected, at.queries, strict=True)
    assert [(s, e) for s, e, p in pairs if p not in special and s != e] == []
    assert "⍽" in "".join(at.shown_queries) and "Ġ" not in "".join(at.shown_queries)
    assert at.legend == "␣ is a space (stored as Ġ); ⍽ is a no-break space (stored as Âł)"


def test_unread_text_names_the_sentences_holding_the_unknown_token_and_the_toy_words(bundled):
    from transformer.lab.analysis import unread_text

    reverse = bundled["reverse"]
    tokenizer = reverse.tokenizer
    sentences = ["a b c", "a 7 b", "é"]
    analysis = analyse(reverse.model, tokenizer, sentences)
    holding = [tokenizer.unk_id in tokenizer.encoding(s).ids for s in sentences]
    unread = unread_text(analysis, tokenizer, "reverse", sentences)
    assert unread.rows == tuple(i for i, held in enumerate(holding) if held)
    assert unread.rows and unread.toy_note == ""  # reverse's own note names its letters
    translate = bundled["translate"]
    words = ["the small zebra sees a ball"]
    plain = analyse(translate.model, translate.tokenizer, words)
    unread = unread_text(plain, translate.tokenizer, "translate", words)
    unk = translate.tokenizer.unk_id
    assert unread.rows == ((0,) if unk in translate.tokenizer.encoding(words[0]).ids else ())
    assert "`zebra`" in unread.toy_note and "`ball`" in unread.toy_note
    assert unread_text(plain, translate.tokenizer, "translate", ["the cat"]).toy_note == ""
