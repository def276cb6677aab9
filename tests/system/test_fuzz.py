"""Fuzzing: hypothesis-generated text through every endpoint that takes text, over HTTP.

Each example sends one generated text to each text endpoint at once (in parallel, one session
per endpoint), the shipped MiniLM and the Tokenize tab's real tokenizers included. An outcome is expected when it is a normal result or an error message with no
traceback, no source location and no absolute path in it, and that is not the catch-all for an
unexpected exception. ``FUZZ_EXAMPLES`` (default 15) sets the number of examples.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving import CROSS, Tally, api_client, call, leaks, serve, still_serves

from transformer.lab.silent_mistakes import SILENT_MISTAKES
from transformer.pretrained.shipped import SMOLLM2
from ui.tabs import tokenize as tokenize_tab

# a system test: thousands of requests over HTTP, minutes; `python -m pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow

MINILM = "all-MiniLM-L6-v2"

# 15 rounds of every text endpoint at once (180 requests) in CI, where the whole run must fit 12
# minutes on two cores; FUZZ_EXAMPLES=300 for a longer run.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))
SILENT = [mistake.label for mistake in SILENT_MISTAKES]

# Text a public Space receives: any Unicode scalar value (gradio_client cannot send lone
# surrogates; test_reliability sends them over raw HTTP), and the classes that break naive code.
ANY = st.characters(exclude_categories=("Cs",))
CLASSES = {
    "emoji": st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),
    "CJK": st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),
    "right-to-left": st.characters(min_codepoint=0x0590, max_codepoint=0x06FF),
    "combining": st.characters(categories=("Mn", "Me")),
    "control": st.characters(categories=("Cc", "Cf")),
    "space": st.sampled_from(" \t\n\r\u00a0\u2028\u2029\u3000\u200b"),
    "ascii": st.characters(min_codepoint=0x20, max_codepoint=0x7E),
}
WORDS = st.sampled_from(
    ["the", "cat", "a", "b", "[UNK]", "[PAD]", "<s>", "##", "▁", "0, 1", "\x00"]
)
TEXT = st.one_of(
    st.text(ANY, max_size=80),
    st.text(st.one_of(*CLASSES.values()), max_size=80),
    st.lists(WORDS, max_size=20).map(" ".join),
    # Repeats, up to 8,000 characters; the reliability matrix sends every endpoint 100,000.
    st.tuples(
        st.text(st.one_of(*CLASSES.values()), min_size=1, max_size=4),
        st.sampled_from([2, 20, 200, 2_000]),
    ).map(lambda pair: pair[0] * pair[1]),
)

TEXT_ENDPOINTS = {
    "/tokenize": lambda t: [
        t,
        "byte-level BPE (GPT-2 style), trained live",
        300,
        None,
        "WordPiece (BERT style), trained live",
        30,
    ],
    "/learn_bpe": lambda t: [t, 30, t],
    "/positional_encoding": lambda t: [32, 16, 10000, t, "dot", False],
    "/embeddings": lambda t: [t, "translate", False],
    "/attention": lambda t: [t, "reverse", CROSS, 1, 1, 1, ["padding mask off"], False],
    "/attention_grid": lambda t: [t, "translate", CROSS, 1, False],
    "/attention_scale": lambda t: [t, "continue", "entropy", 1, 1, 0, 16, 3, -1, False],
    "/generate_step": lambda t: [t, "continue", "sample", 0.8, 5, 0.9, 2, 8, 1, 1, 1, False],
    "/teacher_forcing": lambda t: [t, "translate", t],
    "/snapshot": lambda t: [1, t, False],
    # The shipped pretrained model (BERT family: WordPiece, [CLS]/[SEP], at most 512 tokens).
    "/attention MiniLM": lambda t: [
        t,
        MINILM,
        "encoder self-attention",
        6,
        8,
        1,
        ["padding mask off"],
        False,
    ],
    "/embeddings MiniLM": lambda t: [t, MINILM, False],
    # Inside a layer (the query token left to the default), and a seed's mistake switched on.
    "/inside_layer": lambda t: [t, "translate", "decoder", 2, 3, None, False],
    "/inside_layer MiniLM": lambda t: [t, MINILM, "encoder", 6, 12, None, False],
    # Compare mode: the bundled translation model's encoder beside SmolLM2.
    "/inside_compare": lambda t: [t, "translate", "encoder", 2, 3, None, False, True],
    "/attention mistake": lambda t: [
        t,
        "translate",
        CROSS,
        1,
        1,
        1,
        [],
        False,
        "LayerNorm: unbiased std + eps",
    ],
    # Generate's silent mistakes (SmolLM2 on every other text, a model they do not apply to
    # otherwise) and its key/value cache view.
    "/silent_mistake": lambda t: [
        t,
        SMOLLM2.name if SMOLLM2.available and len(t) % 2 else "continue",
        SILENT[len(t) % len(SILENT)],
    ],
    "/kv_cache": lambda t: [t, "continue", "greedy", 1.0, 0, 1.0, 2, 8, 1, 1, 1, False],
}
# The Tokenize tab's real tokenizers, whichever it offers (one endpoint entry cycling through them).
REAL_TOKENIZERS = [
    label
    for label, value in tokenize_tab.TOKENIZER_CHOICES.items()
    if not (isinstance(value, tuple) and value and value[0] in {"bundled", "train", "upload"})
]
if REAL_TOKENIZERS:
    TEXT_ENDPOINTS["/tokenize real"] = lambda t: [
        t,
        REAL_TOKENIZERS[len(t) % len(REAL_TOKENIZERS)],
        300,
        None,
        REAL_TOKENIZERS[(len(t) + 1) % len(REAL_TOKENIZERS)],
        30,
    ]


def api_of(name: str) -> str:
    """The endpoint a label calls (``"/attention MiniLM"`` calls ``/attention``)."""
    return name.split(" ")[0]


TALLY = Tally()


@pytest.fixture(scope="module")
def sessions():
    with serve() as (_, url):
        clients = {name: api_client(url) for name in TEXT_ENDPOINTS}
        trained = list(clients["/snapshot"].submit("reverse", 20, 0, False, api_name="/train"))
        assert "Done: 20 steps" in trained[-1][0]  # the snapshot endpoint needs a trained model
        yield clients
        for client in clients.values():
            still_serves(client)
        print(
            f"\n[fuzz] {dict(TALLY.requests)}: {TALLY.total} requests, {len(TALLY.failures)} failures"
        )


def _expected(ok: bool, result) -> bool:
    if ok:
        return True
    message = str(result)
    return bool(message.strip()) and not leaks(message) and "something went wrong" not in message


def test_every_text_endpoint_survives_generated_text(sessions):
    pool = ThreadPoolExecutor(len(TEXT_ENDPOINTS))

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.fixed_dictionaries({name: TEXT for name in TEXT_ENDPOINTS}))
    def send(texts: dict[str, str]) -> None:
        def one(name: str) -> tuple[str, bool, object]:
            ok, result = call(sessions[name], api_of(name), *TEXT_ENDPOINTS[name](texts[name]))
            return name, ok, result

        for name, ok, result in pool.map(one, TEXT_ENDPOINTS):
            failure = (
                None
                if _expected(ok, result)
                else f"{name} {texts[name][:80]!r}: {str(result)[:300]}"
            )
            TALLY.add(name, failure)
            assert failure is None, failure

    try:
        send()
    finally:
        pool.shutdown()
    assert min(TALLY.requests[name] for name in TEXT_ENDPOINTS) >= EXAMPLES * 0.9, TALLY.requests


# -- hostile links and oversized model configs -------------------------------
# No server: a link is read by one function, a model folder by another; both must answer every
# input with a result or a named message, never an exception.


class _Request:
    def __init__(self, query: str) -> None:
        from starlette.datastructures import QueryParams

        self.query_params = QueryParams(query)


@pytest.fixture(scope="module")
def views():
    from ui.demo import build_demo

    demo = build_demo("cpu", preload=False)
    yield demo.views
    demo.close()


LINK_KEYS = st.sampled_from(
    ["tab", "step", "model", "layer", "head", "what_if", "kind", "query", "text", "source", "x"]
)
LINK_VALUES = st.one_of(
    TEXT,
    st.sampled_from(
        ["attention", "generate", "inside", "999", "-1", "1e308", "nan", "[a](https://e.x)",
         "![i](https://e.x/p.png)", "<img src=x onerror=alert(1)>", "`", "no √d scaling"]
    ),
)  # fmt: skip


def test_hostile_links_restore_or_say_why_as_text(views, monkeypatch):
    from urllib.parse import urlencode

    import gradio as gr
    from markdown_it import MarkdownIt

    shown: list[str] = []
    monkeypatch.setattr(gr, "Warning", shown.append)
    markdown = MarkdownIt("commonmark", {"html": True})

    @settings(max_examples=max(50, EXAMPLES // 2), deadline=None, derandomize=True, database=None)
    @given(
        st.fixed_dictionaries({"tab": st.sampled_from([*views.tabs, "nowhere"])}),
        st.lists(st.tuples(LINK_KEYS, LINK_VALUES), max_size=12),
    )
    def open_link(tab: dict, pairs: list) -> None:
        shown.clear()
        view, note = views.restore(None, _Request(urlencode([*tab.items(), *pairs])))
        assert view is None or view["tab"] in views.tabs
        rendered = markdown.render(note) if isinstance(note, str) else ""
        for tag in ("<a ", "<img", "<code", "<script"):
            assert tag not in rendered, (pairs, rendered)
        for warning in shown:
            assert "<" not in warning and len(warning) < 2_000, warning

    open_link()


def _get(url: str, target: str) -> tuple[int, str]:
    """(status, body) of a GET of ``target`` on the server at ``url``, through http.client:
    httpx refuses to send a URL over 65,536 characters, which a browser does send."""
    from http.client import HTTPConnection
    from urllib.parse import urlsplit

    address = urlsplit(url)
    connection = HTTPConnection(address.hostname, address.port, timeout=120)
    try:
        connection.request("GET", target)
        answer = connection.getresponse()
        return answer.status, answer.read().decode(errors="replace")
    finally:
        connection.close()


def test_a_64_kb_link_is_answered_without_a_server_error():
    """A 64 KB link answered HTTP 500 (gradio reads the page's address with httpx,
    which raises on a URL over 65,536 characters); it is refused with a page that says why."""
    long_link = "/?tab=attention&text=" + "a" * 64 * 1024
    with serve() as (_, url):
        status, body = _get(url, long_link)
        assert status < 500, (status, body[:300])
        if status >= 400:  # refused: the page says why, and how to open the app
            assert "8,000" in body and 'href="/"' in body and "<script" not in body
        assert _get(url, "/?tab=attention&text=" + "a" * 1_000)[0] == 200  # still serving
        assert _get(url, "/")[0] == 200


def test_oversized_model_configs_are_refused_by_name(hf_models, tmp_path_factory):
    import json
    import shutil

    from transformer.pretrained import PretrainedError, load_pretrained

    folder = shutil.copytree(hf_models["bert"], tmp_path_factory.mktemp("fuzz") / "bert")
    real = json.loads((folder / "config.json").read_text())
    sizes = st.one_of(st.integers(0, 10**8), st.sampled_from([5 * 10**6, 3 * 10**6, 2**31]))
    keys = st.sampled_from(["vocab_size", "num_hidden_layers", "hidden_size", "intermediate_size"])

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(st.dictionaries(keys, sizes, min_size=1, max_size=3))
    def load(changes: dict) -> None:
        (folder / "config.json").write_text(json.dumps({**real, **changes}))
        try:
            load_pretrained(folder)
        except PretrainedError as error:
            assert str(error) and not leaks(str(error).replace(str(folder), "FOLDER"))
            return
        assert all(real[key] == value for key, value in changes.items()), changes

    load()


def _panicking_tokenizer(path) -> None:
    """A tokenizer.json whose pre-tokenizer regex backtracks past Oniguruma's retry limit on
    a run of "a"s: the tokenizers library then panics (pyo3's PanicException, no Exception)."""
    from tokenizers import Regex, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    backend = Backend(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("(a|a)+$"), behavior="isolated")
    path.write_text(backend.to_str(), encoding="utf-8")


def test_a_panicking_uploaded_tokenizer_answers_with_a_message(tmp_path):
    """The panic escaped the error wrapper and /tokenize never answered."""
    from gradio_client import handle_file

    path = tmp_path / "tokenizer.json"
    _panicking_tokenizer(path)
    with serve() as (_, url):
        client = api_client(url)
        upload = "uploaded tokenizer.json"
        with ThreadPoolExecutor(1) as pool:
            for text in ["a" * 40 + "c", "a" * 2_000 + "c"]:
                args = [text, upload, 300, handle_file(str(path)), "(none)", 5]
                answer = pool.submit(call, client, "/tokenize", *args)
                ok, result = answer.result(timeout=60)  # an answer, not a hang
                assert not ok and "cannot encode the text" in str(result), result
                assert not leaks(str(result))
                still_serves(client)
