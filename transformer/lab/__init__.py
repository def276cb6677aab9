"""Instruments that read a model: what-ifs and mistakes, inside a layer, the block diff, attention statistics, perplexity."""
