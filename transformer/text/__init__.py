"""Text to tokens: real subword tokenizers (Hugging Face ``tokenizers``), a replay of how they reach
their pieces, a textbook BPE trainer, and the bundled corpus they train on offline.

``real_tokenizers()`` maps the shipped real tokenizers (BERT's WordPiece, GPT-2's and cl100k_base's
byte-level BPE) to loaders; ``readable_piece`` explains a byte-level piece; ``piece_labels`` writes
a sequence's pieces as a student reads them (:mod:`transformer.text.display`)."""

from .display import PieceLabel, piece_labels
from .real_tokenizers import REAL_TOKENIZERS, load_real_tokenizer, real_tokenizers
from .replay import ReadablePiece, readable_piece

__all__ = [
    "REAL_TOKENIZERS",
    "PieceLabel",
    "ReadablePiece",
    "load_real_tokenizer",
    "piece_labels",
    "readable_piece",
    "real_tokenizers",
]
