"""A from-scratch Transformer ("Attention Is All You Need") built to be read and inspected."""
