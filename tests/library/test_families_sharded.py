"""Every later family saved as real checkpoints are, sharded (``model.safetensors.index.json``
and several ``model-0000k-of-0000n.safetensors``) and in bfloat16, loaded with
``load_pretrained``: the same numbers as ``transformers`` reading the same folder.

Reading sharded folders is the weights reader's job (``transformer/pretrained/_common.py``),
not the families': the loaders read every tensor through it, so each family reads shards and
bfloat16 files without a line of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from family_checks import FAMILIES, PARITY_CHECKS, sharded_family_folder

from transformer.pretrained import load_pretrained

pytest.importorskip("transformers")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_sharded_bfloat16_folder_equals_transformers(name: str, tmp_path: Path) -> None:
    reference = sharded_family_folder(tmp_path, name, seed=4)
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    model = load_pretrained(tmp_path).model
    for check in PARITY_CHECKS.values():
        check(model, reference)
