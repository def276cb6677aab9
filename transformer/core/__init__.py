"""The paper's components and the modern block's, each chosen by a ModelConfig field."""
