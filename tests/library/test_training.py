"""The training loop: it learns, it is reproducible, it reports and it can be cancelled."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch

from transformer.core.config import ModelConfig
from transformer.core.model import Transformer
from transformer.text.tokenization import train_tokenizer
from transformer.training.data import batches, encode_examples
from transformer.training.loop import TrainingConfig, noam_learning_rate, train
from transformer.training.tasks import make_task, task_corpus


@pytest.fixture(scope="module")
def reverse_data():
    task = make_task("reverse", seed=1, n_train=600, n_validation=64, n_test=64)
    tokenizer = train_tokenizer(task_corpus(task), "wordpiece", 40)
    train_pairs = encode_examples(task.train, tokenizer, "encoder-decoder")
    validation_pairs = encode_examples(task.validation, tokenizer, "encoder-decoder")
    return tokenizer, train_pairs, validation_pairs


def small_model(tokenizer, architecture="encoder-decoder") -> Transformer:
    torch.manual_seed(0)
    vocab = tokenizer.vocab_size
    return Transformer(
        ModelConfig(
            src_vocab_size=vocab,
            tgt_vocab_size=vocab,
            d_model=32,
            n_heads=4,
            d_ff=64,
            n_encoder_layers=1 if architecture == "encoder-decoder" else 0,
            n_decoder_layers=1,
            architecture=architecture,
            pad_id=tokenizer.pad_id,
        )
    )


def on_cpu(**settings: Any) -> TrainingConfig:
    """A ``TrainingConfig`` of ``settings`` that runs on the CPU (the same on every machine)."""
    return TrainingConfig(device="cpu", **settings)


FAST = on_cpu(steps=120, batch_size=32, warmup_steps=10, lr_factor=4.0, eval_every=20, snapshots=3)


@pytest.mark.slow  # a real training run
def test_a_few_steps_lower_the_loss(reverse_data):
    tokenizer, train_pairs, validation_pairs = reverse_data
    model = small_model(tokenizer)
    result = train(model, train_pairs, FAST, validation_pairs)
    first = sum(p.loss for p in result.history[:5]) / 5
    last = sum(p.loss for p in result.history[-5:]) / 5
    # The smoothed loss cannot go below the entropy of the smoothed target: compare the excess.
    eps, classes = FAST.label_smoothing, tokenizer.vocab_size - 1  # [PAD] is not a class
    floor = -(1 - eps) * math.log(1 - eps) - eps * math.log(eps / (classes - 1))
    assert last - floor < (first - floor) * 0.9
    evaluations = [p.validation for p in result.history if p.validation]
    assert len(evaluations) == FAST.steps // FAST.eval_every
    assert evaluations[-1]["loss"] < evaluations[0]["loss"]
    assert evaluations[-1]["token_accuracy"] > evaluations[0]["token_accuracy"]
    assert all(0.0 <= e["exact_match"] <= 1.0 for e in evaluations)  # greedy, periodically


@pytest.mark.slow  # a real training run
def test_decoder_only_training_lowers_the_loss():
    task = make_task("continue", seed=1, n_train=400, n_validation=32, n_test=32)
    tokenizer = train_tokenizer(task_corpus(task), "unigram", 120)
    pairs = encode_examples(task.train, tokenizer, "decoder-only")
    assert pairs[0].source == () and pairs[0].target[0] == tokenizer.bos_id
    result = train(small_model(tokenizer, "decoder-only"), pairs, FAST)
    assert result.history[-1].loss < result.history[0].loss


def test_training_is_reproducible(reverse_data):
    tokenizer, train_pairs, _ = reverse_data
    config = on_cpu(steps=8, batch_size=16, warmup_steps=4, snapshots=0)
    first = train(small_model(tokenizer), train_pairs, config)
    second = train(small_model(tokenizer), train_pairs, config)
    assert [p.loss for p in first.history] == [p.loss for p in second.history]
    other_seed = train(
        small_model(tokenizer), train_pairs, TrainingConfig(**{**config.to_dict(), "seed": 5})
    )
    assert [p.loss for p in other_seed.history] != [p.loss for p in first.history]


@pytest.mark.slow  # a real training run
def test_callback_snapshots_and_cancel(reverse_data):
    tokenizer, train_pairs, _ = reverse_data
    seen = []
    result = train(
        small_model(tokenizer),
        train_pairs,
        FAST,
        callback=seen.append,
        should_stop=lambda: len(seen) >= 12,
    )
    assert result.cancelled and result.steps_done == 12 == len(seen)
    assert [p.step for p in seen] == list(range(1, 13))
    assert all(0 < p.fraction <= 0.1 for p in seen)
    assert sorted(result.snapshots) == [
        1,
        11,
    ]  # planned at 1, 11, 120 (log-spread); cancelled at 12
    full = train(small_model(tokenizer), train_pairs, FAST)
    assert sorted(full.snapshots) == [1, 11, 120]
    assert not torch.equal(
        full.snapshots[1]["generator.proj.bias"], full.snapshots[120]["generator.proj.bias"]
    )


def test_noam_schedule_warms_up_then_decays():
    lrs = [noam_learning_rate(s, d_model=64, warmup_steps=100) for s in range(1, 1001)]
    peak = max(range(1000), key=lrs.__getitem__) + 1
    assert peak == 100
    assert lrs[99] == pytest.approx(64**-0.5 * 100**-0.5)
    assert lrs[399] == pytest.approx(lrs[99] / 2)  # 1/√step decay: 4× the steps, half the rate


def test_batches_pad_and_shift(reverse_data):
    tokenizer, train_pairs, _ = reverse_data
    batch = batches(train_pairs[:10], 4, tokenizer.pad_id)[0]
    assert torch.equal(batch.tgt_in[:, 1:], batch.tgt_out[:, :-1])
    assert (batch.tgt_in[:, 0] == tokenizer.bos_id).all()
    assert batch.n_tokens == int((batch.tgt_out != tokenizer.pad_id).sum())
    with pytest.raises(ValueError, match="out of range"):
        TrainingConfig(steps=0)


def test_evaluation_and_inspection_leave_a_training_model_in_training_mode(reverse_data):
    from transformer.lab.inspection import analyse
    from transformer.training.evaluation import evaluate_batches, evaluate_model, exact_match

    tokenizer, _, validation_pairs = reverse_data
    model = small_model(tokenizer).eval()  # dropout 0.1: on, it would change every result
    examples = make_task("reverse", seed=1, n_train=0, n_validation=8, n_test=8).test
    eval_batches = batches(validation_pairs[:16], 16, tokenizer.pad_id)
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    calls = {
        "evaluate_batches": lambda: evaluate_batches(
            model, eval_batches, torch.device("cpu"), with_exact_match=True
        ),
        "evaluate_model": lambda: evaluate_model(model, tokenizer, examples, "encoder-decoder"),
        "exact_match": lambda: exact_match(model, validation_pairs[:16], bos, eos),
        "analyse": lambda: analyse(model, tokenizer, ["a b c", "d e"]).trace.logits,
    }
    expected = {name: call() for name, call in calls.items()}
    model.train()
    for name, call in calls.items():
        torch.manual_seed(1)  # dropout, if it were on, would change the result
        result = call()
        if isinstance(result, torch.Tensor):
            assert torch.equal(result, expected[name]), name
        else:
            assert result == expected[name], name
        assert model.training, f"{name} left the model in eval mode"


# -- [PAD] is not a class -------------------------------------------------------------------------


def annotated_transformer_loss(logits, targets, pad_id, smoothing):
    """A direct re-implementation: the Annotated Transformer's LabelSmoothing target (the target
    gets 1 - ε, the other V - 2 classes ε / (V - 2), [PAD] nothing) and cross-entropy over the
    softmax of the real classes only (the [PAD] column removed), averaged over real targets."""
    vocab = logits.size(-1)
    keep = [c for c in range(vocab) if c != pad_id]
    total, count = 0.0, 0
    for row_logits, target in zip(logits.reshape(-1, vocab), targets.reshape(-1), strict=True):
        if int(target) == pad_id:
            continue
        log_probs = torch.log_softmax(row_logits[keep].double(), dim=0)
        true_dist = torch.full((vocab,), smoothing / (vocab - 2), dtype=torch.float64)
        true_dist[int(target)] = 1 - smoothing
        true_dist[pad_id] = 0.0
        total -= float((true_dist[keep] * log_probs).sum())
        count += 1
    return total / count


@pytest.mark.parametrize("pad_id", [0, 3])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_the_loss_gives_padding_no_mass_and_matches_a_direct_implementation(pad_id, smoothing):
    from transformer.training.evaluation import sequence_loss

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=generator) * 3
    targets = torch.randint(0, 11, (3, 5), generator=generator)
    targets[targets == pad_id] = (pad_id + 1) % 11
    targets[0, 3:] = pad_id
    targets[2, 1] = pad_id
    loss = sequence_loss(logits, targets, pad_id, smoothing)
    assert float(loss) == pytest.approx(
        annotated_transformer_loss(logits, targets, pad_id, smoothing), rel=1e-5
    )
    # No gradient reaches the [PAD] logit, nor any position whose target is padding.
    leaf = logits.clone().requires_grad_(True)
    sequence_loss(leaf, targets, pad_id, smoothing).backward()
    assert torch.equal(leaf.grad[..., pad_id], torch.zeros(3, 5))
    assert torch.equal(
        leaf.grad[targets == pad_id], torch.zeros(int((targets == pad_id).sum()), 11)
    )


def test_training_leaves_the_padding_row_of_the_tied_embedding_at_zero(reverse_data):
    tokenizer, train_pairs, _ = reverse_data
    model = small_model(tokenizer)
    tied = Transformer(model.config.replace(tie_embeddings=True))  # tied, as the recipes do
    pad = tokenizer.pad_id
    assert torch.equal(tied.generator.proj.weight[pad], torch.zeros(tied.config.d_model))
    train(tied, train_pairs, on_cpu(steps=15, batch_size=16, warmup_steps=2))
    assert tied.generator.proj.weight is tied.tgt_embedding.lookup.weight
    assert torch.equal(tied.generator.proj.weight[pad], torch.zeros(tied.config.d_model))
    assert float(tied.generator.proj.bias[pad].detach()) == 0.0
    assert tied.generator.proj.weight[pad + 1].abs().max() > 0  # other rows did learn


# -- batches --------------------------------------------------------------------------------------


def test_a_batch_whose_first_source_is_empty_keeps_every_source():
    from transformer.training.data import EncodedPair, collate

    pairs = [EncodedPair((), (1, 5, 2)), EncodedPair((7, 8), (1, 6, 2))]
    batch = collate(pairs, pad_id=0)
    assert batch.src is not None and batch.src.tolist() == [[0, 0], [7, 8]]
    # An encoder-decoder batch of only empty sources still has a source, if the caller says so.
    only_empty = collate(pairs[:1], pad_id=0, has_source=True)
    assert tuple(only_empty.src.shape) == (1, 0)
    assert collate(pairs[:1], pad_id=0).src is None  # inferred: decoder-only


def test_training_on_pairs_whose_first_source_is_empty_runs(reverse_data):
    from transformer.training.data import EncodedPair

    tokenizer, train_pairs, _ = reverse_data
    pairs = [EncodedPair((), train_pairs[0].target), *train_pairs[1:8]]
    config = on_cpu(steps=3, batch_size=8, warmup_steps=2, snapshots=0)
    result = train(small_model(tokenizer), pairs, config)
    assert result.steps_done == 3 and all(math.isfinite(p.loss) for p in result.history)


# -- randomness -----------------------------------------------------------------------------------


def test_training_leaves_the_global_generator_alone_and_stays_reproducible(reverse_data):
    from transformer.training.recipes import RECIPES, build_model

    tokenizer, train_pairs, _ = reverse_data
    recipe = RECIPES["reverse"]
    recipe = replace(recipe, model=recipe.model.replace(d_model=32, d_ff=64, n_encoder_layers=1))
    config = on_cpu(steps=6, batch_size=16, warmup_steps=2, snapshots=0)

    def run():
        model = build_model(recipe, tokenizer)  # dropout 0.1: the run draws random numbers
        return model, train(model, train_pairs, config)

    torch.manual_seed(1234)
    before = torch.get_rng_state()
    first_model, first = run()
    assert torch.equal(torch.get_rng_state(), before)  # nobody else's stream moved
    torch.rand(1000)  # someone else draws in between: the next run is still the same
    second_model, second = run()
    assert [p.loss for p in first.history] == [p.loss for p in second.history]
    for (name, a), (_, b) in zip(
        first_model.state_dict().items(), second_model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_two_trainings_in_threads_each_reproduce_their_run(reverse_data):
    import threading

    tokenizer, train_pairs, _ = reverse_data
    config = on_cpu(steps=6, batch_size=16, warmup_steps=2, snapshots=0)
    alone = {
        seed: train(small_model(tokenizer), train_pairs, replace(config, seed=seed))
        for seed in (0, 1)
    }
    together = {}
    models = {seed: small_model(tokenizer) for seed in (0, 1)}  # the same initial weights

    def work(seed):
        together[seed] = train(models[seed], train_pairs, replace(config, seed=seed))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for seed in (0, 1):
        assert [p.loss for p in together[seed].history] == [p.loss for p in alone[seed].history]
