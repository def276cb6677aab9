"""What every family's parity test checks against ``transformers`` (tests/test_families_*.py):
the same numbers layer by layer and head by head, the same greedy text, the cache."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import family_folder

from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.core.run import TRACE
from transformer.generation import DecodingSettings, generate
from transformer.generation.sampling import never_generated
from transformer.pretrained import load_pretrained

PROMPT = [5, 17, 3, 42, 8, 61, 29, 77, 12, 50, 33]
TOLERANCE = 1e-4


def gap(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """The largest absolute difference."""
    return (ours.float() - theirs.float()).abs().max().item()


def assert_close(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    difference = gap(ours, theirs)
    assert difference <= TOLERANCE, f"{what}: max |ours - transformers| = {difference:.2e}"


def check_forward(model: Transformer, reference: torch.nn.Module) -> None:
    """Every layer's input, every head's attention weights, the final norm's output and the
    logits (captured and fast path) within :data:`TOLERANCE` of ``transformers``."""
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        expected = reference(ids, output_hidden_states=True, output_attentions=True)
        trace = model(tgt=ids, call=TRACE)
        fast = model(tgt=ids)
    layers = trace.decoder_layers
    assert len(layers) == len(expected.attentions)
    for i, layer in enumerate(layers):
        assert_close(layer.input, expected.hidden_states[i], f"input of layer {i}")
        weights = layer.self_attention.weights
        assert weights.shape == expected.attentions[i].shape, i
        for h in range(weights.size(1)):
            assert_close(weights[:, h], expected.attentions[i][:, h], f"layer {i} head {h}")
    assert_close(trace.decoder_output, expected.hidden_states[len(layers)], "final norm")
    assert_close(trace.logits, expected.logits, "logits")
    assert_close(fast, expected.logits, "logits (fast path)")


def check_generation(model: Transformer, reference: torch.nn.Module, new: int = 12) -> None:
    """Greedy decoding, with and without the cache, writes what ``generate()`` writes (told,
    as our decoding is, never to write the padding id)."""
    ids = torch.tensor([PROMPT])
    never = never_generated(model.config)
    with torch.no_grad():
        out = reference.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
            suppress_tokens=None if never is None else [never],
        )
    expected = out[0, ids.size(1) :].tolist()
    for use_cache in (True, False):
        settings = DecodingSettings(strategy="greedy", max_new_tokens=new, use_cache=use_cache)
        assert generate(model, PROMPT, settings, eos_id=None) == expected, use_cache


def check_cache(model: Transformer) -> None:
    """Decoding step by step through the cache gives the logits of one uncached pass, and the
    positions of a cached step start at the cache length."""
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        full = model(tgt=ids)
        cache = model.new_cache()
        steps = [model.decode(ids[:, :4], cache=cache).logits]
        for t in range(4, ids.size(1)):
            assert cache.length == t
            steps.append(model.decode(ids[:, t : t + 1], cache=cache).logits)
    assert_close(torch.cat(steps, dim=1), full, "cached logits")


PARITY_CHECKS: dict[str, Callable[[Transformer, torch.nn.Module], None]] = {
    "forward": check_forward,
    "generation": check_generation,
    "cache": lambda model, reference: check_cache(model),
}
"""The three checks every family's parity test runs, by name: each family's module
parametrizes one test over them, so a failure names the family, its case and the check."""


def parity_test(
    load: Callable[[Path, str], tuple[Transformer, torch.nn.Module]], cases: Iterable[str]
) -> Callable[..., None]:
    """A family's parity test, parametrized over its ``cases`` and the ``PARITY_CHECKS``:
    ``load(folder, case)`` saves the case's reference in ``folder`` and returns our model of it
    and the reference (asserting what our config must say of the case on the way)."""

    @pytest.mark.parametrize("check", sorted(PARITY_CHECKS))
    @pytest.mark.parametrize("case", sorted(cases))
    def test(tmp_path: Path, case: str, check: str) -> None:
        PARITY_CHECKS[check](*load(tmp_path, case))

    return test


def loaded_family(folder: Path, family: str, **options: Any) -> tuple[Transformer, torch.nn.Module]:
    """Our model of a tiny random ``family`` folder (``family_folder``'s ``options``), and the
    reference it was saved from."""
    reference = family_folder(folder, family, **options)
    return load_pretrained(folder).model, reference


def load_case(
    folder: Path, family: str, name: str, config: dict
) -> tuple[ModelConfig, Transformer, torch.nn.Module]:
    """A parity case: ``family``'s ``transformers`` model of ``config`` saved in ``folder``
    (seeded by the case's name, bfloat16 weights where the name says ``bf16``) and loaded by
    ours. Returns our config and model, and the float32 reference."""
    dtype = torch.bfloat16 if "bf16" in name else None
    reference = family_folder(folder, family, seed=len(name), dtype=dtype, **config)
    checkpoint = load_pretrained(folder)
    return checkpoint.config, checkpoint.model, reference


def sharded_family_folder(folder: Path, name: str, seed: int) -> torch.nn.Module:
    """:data:`FAMILIES`' ``name`` saved in ``folder`` as the Hub publishes large models (bfloat16
    weights in several shards with an index); returns the float32 ``transformers`` reference."""
    family, config, matrices, _ = FAMILIES[name]
    reference = family_folder(
        folder,
        family,
        seed=seed,
        matrices=matrices,
        dtype=torch.bfloat16,
        max_shard_size="40KB",
        **config,
    )
    assert (folder / "model.safetensors.index.json").is_file()
    return reference


def logit_gap(model: Transformer, reference: torch.nn.Module) -> float:
    """The largest logit difference from ``transformers`` on :data:`PROMPT`."""
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        return gap(model(tgt=ids), reference(ids).logits)


def check_wrong_choice_fails(
    model: Transformer, reference: torch.nn.Module, wrong: Callable[[], object]
) -> None:
    """The right model matches; with ``wrong()`` applied (a context manager that swaps one
    choice for its mistaken form) the logits miss by ten times the tolerance."""
    assert logit_gap(model, reference) <= TOLERANCE
    with wrong():  # type: ignore[attr-defined]
        assert logit_gap(model, reference) > 10 * TOLERANCE


@contextlib.contextmanager
def patched(
    monkeypatch: pytest.MonkeyPatch, changes: Iterable[tuple[object, str, object]]
) -> Iterator[None]:
    """Each ``(target, attribute, value)`` of ``changes`` set while the block runs."""
    with monkeypatch.context() as patch:
        for target, name, value in changes:
            patch.setattr(target, name, value)
        yield


def attentions(model: Transformer) -> list[torch.nn.Module]:
    """The self-attention of each decoder layer, first to last."""
    return [layer.self_attention for layer in model.decoder.layers]


def residuals(model: Transformer) -> list[torch.nn.Module]:
    """Both residual connections of each decoder layer (attention's, then the feed-forward's)."""
    return [
        residual
        for layer in model.decoder.layers
        for residual in (layer.self_attention_residual, layer.feed_forward_residual)
    ]


def check_changes_fail(
    model: Transformer,
    reference: torch.nn.Module,
    monkeypatch: pytest.MonkeyPatch,
    changes: list[tuple[object, str, object]],
) -> None:
    """:func:`check_wrong_choice_fails` for a wrong choice that is a few attributes set
    (``(target, attribute, value)`` each)."""
    check_wrong_choice_fails(model, reference, lambda: patched(monkeypatch, changes))


# One shape of each later family that the tests of every tier share: name → (family, its
# ``transformers`` config over ``TINY_FAMILY``, the matrices' scale (large where a soft cap must
# bite), the steps Inside a layer must show for it).
SLIDING, FULL = "sliding_attention", "full_attention"

FAMILIES = {
    # name: (family, config, matrices' scale, steps the walkthrough must show)
    "qwen3": ("qwen3", dict(head_dim=24), None, {"self.qk_norm"}),
    "olmo2": (
        "olmo2",
        {},
        None,
        {"self.qk_norm", "self.norm_out_sublayer", "ff.norm_out_sublayer"},
    ),
    "gemma2": (
        "gemma2",
        dict(
            head_dim=16,
            query_pre_attn_scalar=24,
            sliding_window=3,
            layer_types=[SLIDING, FULL, SLIDING],
            attn_logit_softcapping=1.5,
            final_logit_softcapping=2.0,
        ),
        0.25,
        {"self.softcap", "self.norm_out_sublayer", "ff.norm_out_sublayer"},
    ),
    "gemma3": (
        "gemma3_text",
        dict(head_dim=16, sliding_window=3, layer_types=[SLIDING, SLIDING, FULL]),
        None,
        {"self.qk_norm", "self.norm_out_sublayer"},
    ),
    "pythia": (
        "gpt_neox",
        dict(
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25,
            }
        ),
        None,
        {"self.angles"},
    ),
    "phi3-longrope": (
        "phi3",
        dict(
            max_position_embeddings=128,
            original_max_position_embeddings=32,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.75,
                "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                "long_factor": [2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
            },
        ),
        None,
        {"self.angles"},
    ),
    "mistral": ("mistral", dict(sliding_window=3), None, {"self.masked"}),
}
