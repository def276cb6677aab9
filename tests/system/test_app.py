"""End-to-end: every named endpoint through gradio_client against the app launched in-process."""

from __future__ import annotations

import pytest
from serving import CROSS, GENERATE, api_client, launched

import app as visualiser
from ui.serving.state import TRAINED_HERE

DECODER_SELF = "decoder masked self-attention"


@pytest.fixture(scope="module")
def url():
    with launched(visualiser.build_demo("cpu")) as address:
        yield address


@pytest.fixture
def client(url):
    return api_client(url)


def test_the_named_endpoints_exist(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/tokenize", "/positional_encoding", "/attention", "/train", "/embeddings"} <= names


def test_tokenize_highlights_and_tabulates(client):
    text = "the cat sat"
    stats, pieces, stats_b, _pieces_b, table, replay_md = client.predict(
        text, "WordPiece (BERT style), trained live", 400, None, "(none)", 30, api_name="/tokenize"
    )
    rows = table["data"]
    assert "wordpiece" in stats and f"**{len(rows)} tokens**" in stats
    # Offsets map every token back onto its span of the text (WordPiece marks continuations ##).
    assert [text[start:end] for _, _, _, start, end, *_ in rows] == [
        piece.removeprefix("##") for _, piece, *_ in rows
    ]
    assert "".join(segment["token"] for segment in pieces) == text
    assert stats_b == "" and "`the`" in replay_md


def test_tokenize_empty_text_is_an_empty_result(client):
    stats, pieces, *_ = client.predict(
        "", "BPE, trained live on the bundled corpus", 400, None, "(none)", 5, api_name="/tokenize"
    )
    assert "0 tokens" in stats and not pieces


@pytest.mark.parametrize("text", ["🤖 中文 مرحبا e\u0301 \x00\x07 tab\there", " " * 50])
def test_tokenize_odd_unicode_does_not_crash(client, text):
    stats, *_ = client.predict(
        text,
        "byte-level BPE (GPT-2 style), trained live",
        400,
        None,
        "Unigram (SentencePiece style), trained live",
        30,
        api_name="/tokenize",
    )
    assert "tokens" in stats


def test_tokenize_too_long_text_is_a_clear_message(client):
    with pytest.raises(Exception, match="longer than 20,000 characters"):
        client.predict(
            "a" * 25_000,
            "BPE, trained live on the bundled corpus",
            400,
            None,
            "(none)",
            5,
            api_name="/tokenize",
        )


def test_broken_uploaded_tokenizer_is_a_clear_message(client, tmp_path):
    from gradio_client import handle_file

    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"this is": "not a tokenizer"}')
    with pytest.raises(Exception) as caught:
        client.predict(
            "hello",
            "uploaded tokenizer.json",
            400,
            handle_file(str(broken)),
            "(none)",
            5,
            api_name="/tokenize",
        )
    assert "tokenizer" in str(caught.value).lower() and "Traceback" not in str(caught.value)
    assert str(tmp_path) not in str(caught.value)


def test_positional_encoding(client):
    heatmap, curves, similarity = client.predict(
        64, 32, 10000, "0, 1, 5", "cosine", False, api_name="/positional_encoding"
    )
    assert heatmap and curves and similarity


@pytest.mark.parametrize(
    ("d_model", "dims", "message"),
    [(63, "0", "even"), (64, "0, 99", "between 0 and 63"), (64, "x", "whole numbers")],
)
def test_positional_encoding_bad_input(client, d_model, dims, message):
    with pytest.raises(Exception, match=message):
        client.predict(d_model, 32, 10000, dims, "dot", False, api_name="/positional_encoding")


def test_attention_on_the_reversal_model(client):
    single, masks, diff, summary = client.predict(
        "a b c d e\nf g h i", "reverse", CROSS, 1, 2, 2, [], False, api_name="/attention"
    )
    assert "`e d c b a`" in summary and "`i h g f`" in summary
    assert single and masks and diff
    grid = client.predict(
        "a b c d e\nf g h i", "reverse", CROSS, 2, False, api_name="/attention_grid"
    )
    assert grid


def test_attention_what_if_reports_the_change(client):
    *_, summary = client.predict(
        "the cat sees a dog",
        "translate",
        DECODER_SELF,
        1,
        1,
        1,
        ["causal mask off"],
        False,
        api_name="/attention",
    )
    assert "What-if (causal mask off)" in summary


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "reverse", CROSS, 1, 1, 1), "at least one sentence"),
        (("a\nb\nc\nd", "reverse", CROSS, 1, 1, 1), "at most 3 sentences"),
        (("a b", "reverse", CROSS, 3, 1, 1), "layer must be between 1 and 2"),
        (("a b", "reverse", CROSS, 99, 1, 1), "above the largest value"),
        # The Head slider's range is the first model's 4 heads: gradio refuses 6 itself.
        (("a b", "reverse", CROSS, 1, 6, 1), "head must be between 1 and 4"),
        (("a b", "continue", CROSS, 1, 1, 1), "has no cross-attention"),
        (
            ("a b", TRAINED_HERE, CROSS, 1, 1, 1),
            "no model has been trained in this session",
        ),
        ((" ".join(["a"] * 600), "reverse", CROSS, 1, 1, 1), "reads at most 512"),
    ],
)
def test_attention_bad_input(client, args, message):
    with pytest.raises(Exception, match=message):
        client.predict(*args, [], False, api_name="/attention")


def test_training_is_private_to_its_session(url):
    alice, bob = api_client(url), api_client(url)
    job = alice.submit("reverse", 20, 0, False, api_name="/train")
    updates = list(job)
    assert "Done: 20 steps" in updates[-1][0]
    summary = alice.predict(
        "a b c", TRAINED_HERE, CROSS, 1, 1, 1, [], False, api_name="/attention"
    )[-1]
    assert "Sentence 1" in summary
    with pytest.raises(Exception, match="no model has been trained in this session"):
        bob.predict("a b c", TRAINED_HERE, CROSS, 1, 1, 1, [], False, api_name="/attention")
    snapshot = alice.predict(0, "a b c", False, api_name="/snapshot")
    assert snapshot


def test_model_info_counts_parameters(client):
    info, params, _config = client.predict("reverse", api_name="/model_info")
    assert "63,119,496" in info
    rows = {row[0]: row[1] for row in params["data"]}
    assert int(rows["total"].replace(",", "")) > 0


def test_generate_streams_one_step_at_a_time(client):
    updates = list(client.submit(*GENERATE, api_name="/generate"))
    steps = [int(u[0].split("(")[1].split(" step")[0]) for u in updates if "Output so far" in u[0]]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 3  # one update per step
    final = updates[-1][0]
    assert "**Finished** (eos)" in final and "`le minou petol voitte une ballette rougin`" in final


def test_step_back_and_step_again_reproduce(client):
    sampled = ["the teacher sees", "continue", "sample", 0.9, 0, 1.0, 3, 40, 7, 1, 1, False]
    first = [client.predict(*sampled, api_name="/generate_step")[0] for _ in range(3)]
    back = client.predict(*sampled, api_name="/generate_back")[0]
    assert back == first[1]
    assert client.predict(*sampled, api_name="/generate_step")[0] == first[2]
    reset = client.predict(*sampled, api_name="/generate_reset")[0]
    assert "Press **Step**" in reset


def test_generation_state_is_private_to_each_session(url):
    alice, bob = api_client(url), api_client(url)
    for _ in range(3):
        alice.predict(*GENERATE, api_name="/generate_step")
    assert "(1 step)" in bob.predict(*GENERATE, api_name="/generate_step")[0]
    assert "(4 steps)" in alice.predict(*GENERATE, api_name="/generate_step")[0]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({0: ""}, "enter a source sentence"),
        ({7: 0}, "less than|between 1 and|below the smallest value"),
        ({2: "nucleus"}, "nucleus"),
    ],
)
def test_generate_bad_input(client, changes, message):
    args = list(GENERATE)
    for index, value in changes.items():
        args[index] = value
    with pytest.raises(Exception, match=message):
        client.predict(*args, api_name="/generate_step")


def test_teacher_forcing_against_a_reference(client):
    text, table = client.predict(
        GENERATE[0],
        "translate",
        "le minou petol voitte une ballette rougin",
        api_name="/teacher_forcing",
    )
    assert "**100%**" in text
    assert all(row[-1] == "✓" for row in table["data"])
