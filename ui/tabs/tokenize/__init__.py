"""Tokenize tab: text → tokens with any tokenizer (our bundled and live-trained ones, the real
BERT, GPT-2 and GPT-4 tokenizers, a pretrained model's, an upload), a replay of how the tokenizer
chose them, and a BPE tokenizer learning its merges.

Every control redraws the view (the Tokenize button stays for the ``/tokenize`` endpoint); the
view is drawn when the page opens.

Modules: `choices` (the tokenizer menu, picking one), `views` (the token view), `replay_view`
(the replay as markdown), `handlers` (the module-level handlers), `layout` (build())."""

from .choices import (
    DEFAULT_VOCAB,
    TOKENIZER_CHOICES,
    VOCAB_INFO,
    VOCAB_RANGE,
    corpus_tokenizer,
    pick_tokenizer,
    tokenizer_choices,
    vocab_in_range,
)
from .handlers import (
    learn,
    run_example,
    step_control,
    tokenize,
    tokenize_view,
    trained_algorithm,
    vocab_control,
)
from .layout import COLORS, build
from .replay_view import REPLAY_WORDS, replay_markdown, replay_steps, word_steps
from .views import highlighted, plural, unknown_message, visible

__all__ = [
    "COLORS",
    "DEFAULT_VOCAB",
    "REPLAY_WORDS",
    "TOKENIZER_CHOICES",
    "VOCAB_INFO",
    "VOCAB_RANGE",
    "build",
    "corpus_tokenizer",
    "highlighted",
    "learn",
    "pick_tokenizer",
    "plural",
    "replay_markdown",
    "replay_steps",
    "run_example",
    "step_control",
    "tokenize",
    "tokenize_view",
    "tokenizer_choices",
    "trained_algorithm",
    "unknown_message",
    "visible",
    "vocab_control",
    "vocab_in_range",
    "word_steps",
]
