"""Text to tokens: real subword tokenizers (Hugging Face ``tokenizers``), a replay of how they reach
their pieces, a textbook BPE trainer, and the bundled corpus they train on offline."""
