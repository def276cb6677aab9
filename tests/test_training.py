"""The training loop: it learns, it is reproducible, it reports and it can be cancelled."""

from __future__ import annotations

import pytest
import torch

from transformer.config import ModelConfig
from transformer.model import Transformer
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


FAST = TrainingConfig(
    steps=120,
    batch_size=32,
    warmup_steps=10,
    lr_factor=4.0,
    eval_every=20,
    snapshots=3,
    device="cpu",
)


def test_a_few_steps_lower_the_loss(reverse_data):
    tokenizer, train_pairs, validation_pairs = reverse_data
    model = small_model(tokenizer)
    result = train(model, train_pairs, FAST, validation_pairs)
    first = sum(p.loss for p in result.history[:5]) / 5
    last = sum(p.loss for p in result.history[-5:]) / 5
    assert last < first * 0.9
    evaluations = [p.validation for p in result.history if p.validation]
    assert len(evaluations) == FAST.steps // FAST.eval_every
    assert evaluations[-1]["loss"] < evaluations[0]["loss"]
    assert evaluations[-1]["token_accuracy"] > evaluations[0]["token_accuracy"]
    assert all(0.0 <= e["exact_match"] <= 1.0 for e in evaluations)  # greedy, periodically


def test_decoder_only_training_lowers_the_loss():
    task = make_task("continue", seed=1, n_train=400, n_validation=32, n_test=32)
    tokenizer = train_tokenizer(task_corpus(task), "unigram", 120)
    pairs = encode_examples(task.train, tokenizer, "decoder-only")
    assert pairs[0].source == () and pairs[0].target[0] == tokenizer.bos_id
    result = train(small_model(tokenizer, "decoder-only"), pairs, FAST)
    assert result.history[-1].loss < result.history[0].loss


def test_training_is_reproducible(reverse_data):
    tokenizer, train_pairs, _ = reverse_data
    config = TrainingConfig(steps=8, batch_size=16, warmup_steps=4, device="cpu", snapshots=0)
    first = train(small_model(tokenizer), train_pairs, config)
    second = train(small_model(tokenizer), train_pairs, config)
    assert [p.loss for p in first.history] == [p.loss for p in second.history]
    other_seed = train(
        small_model(tokenizer), train_pairs, TrainingConfig(**{**config.to_dict(), "seed": 5})
    )
    assert [p.loss for p in other_seed.history] != [p.loss for p in first.history]


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
    from transformer.inspection import analyse
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
