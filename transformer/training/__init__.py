"""Training the bundled models: the toy tasks, batching, the training loop as in the paper,
evaluation metrics and the recipes that rebuild each shipped checkpoint."""
