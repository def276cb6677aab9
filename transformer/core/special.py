"""The special tokens every tokenizer we train starts with, and their fixed ids.

A core module (it imports nothing) so that the model configuration, generation and the
tokenizers all read the same ids: ``[PAD]``=0, ``[UNK]``=1, ``[BOS]``=2, ``[EOS]``=3,
``[CLS]``=4, ``[SEP]``=5, ``[MASK]``=6.
"""

from __future__ import annotations

PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS: list[str] = [
    PAD_TOKEN,
    UNK_TOKEN,
    BOS_TOKEN,
    EOS_TOKEN,
    CLS_TOKEN,
    SEP_TOKEN,
    MASK_TOKEN,
]
"""Special tokens of every tokenizer we train, in id order: the id of each is its index."""
PAD_ID, UNK_ID, BOS_ID, EOS_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
