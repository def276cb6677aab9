"""What the tab says: its presets, limits and each method explained in two sentences."""

from __future__ import annotations

CLEAN = "The Eiffel Tower is in the city of"
CORRUPTED = "The Colosseum is in the city of"
ANSWER = " Paris"
WRONG = " Rome"
TEXT = "The Eiffel Tower is in the city of"
# Patching, ablation and integrated gradients run the model once per part (or per step): a
# prompt is kept short enough that a sweep of SmolLM2 takes seconds, not minutes, on a CPU.
MAX_RESEARCH_TOKENS = 64
# A sweep may cost this many times one pass's limit (limits.MAX_PASS_COST): SmolLM2's residual
# patching over 12 tokens (360 runs, about 5.8e11 parameter-tokens) fits, over 40 tokens not.
SWEEP_COST_FACTOR = 2
IG_STEPS = 50  # captum's default number of steps for integrated gradients

# The sites of activation patching, as the library names them, with what the page calls them.
SITES = {
    "residual": "the residual stream before each layer",
    "attention": "each attention layer's output",
    "mlp": "each MLP's output",
    "head": "each head's output",
    "cross": "each cross-attention layer's output (encoder-decoder models)",
}
# The same, short enough for a figure's title on a phone.
SHORT_SITES = {
    "residual": "residual stream",
    "attention": "attention outputs",
    "mlp": "MLP outputs",
    "head": "head outputs",
    "cross": "cross-attention outputs",
}

INTRO = (
    "Which part of the model made this prediction? Researchers answer with the methods below; "
    "each is explained beside its figure, with the code that computes it. They follow a "
    "model's next token: one that continues text (the bundled **continue** model, SmolLM2, "
    "GPT-2 …) or the decoder of a translating one (**translate**, **reverse**, Marian), its "
    "source held fixed. An encoder-only model (MiniLM) predicts no token: only *Why a head "
    "attends* applies to it, and each other section says why."
)

PATCHING = (
    "Run the model on a clean prompt and on a corrupted one of the same length, then rerun the "
    "corrupted one with one activation copied from the clean run: where that copy brings the "
    "clean answer back, that part carries the difference. The metric is the logit difference "
    "of the answer and the wrong answer, scaled so that 0 is the corrupted run and 1 the clean."
)
ABLATION = (
    "Switch one head off (its output set to zero, or to its mean over the text) and measure "
    "how much worse the model predicts each next token. A head whose removal raises the loss "
    "most is one the model relies on; the perplexity meter says the same in choices."
)
LOGIT = (
    "The residual stream at the last position is a sum of what the embedding, each head and "
    "each MLP wrote into it, so the logit of a token is a sum too, one term a part, read "
    "through the final norm with its scale frozen at the real pass. The terms add up to the "
    "real logit: the tallest bars are the parts that pushed this token."
)
INPUT = (
    "Gradient × input multiplies each input token's embedding by the logit's gradient there: "
    "a first-order guess of what the token contributes. Integrated gradients averages that "
    "gradient along a straight path from a baseline to the real input, and its attributions "
    "sum to the logit's change along it (completeness; the closer, the more points the "
    "integral takes). "
    "The baseline is the text with every token after the first replaced by padding: all-zero "
    "embeddings break a model that normalises them first (RMSNorm divides by almost nothing "
    "there), and the first token is where a model parks its attention, so it stays."
)
SCORES_2017 = (
    "In the 2017 models the query and the key are (token + position) times a matrix, so their "
    "dot product splits into token-token, token-position, position-token and "
    "position-position parts (after the first layer, what earlier layers wrote and the biases "
    "add two more). Each part is a heat map here; together they are the head's scores."
)
SCORES_ROTARY = (
    "With rotary positions the score is a sum over pairs of dimensions, each pair turned by "
    "an angle that grows with the position at its own frequency; the pairs are grouped into "
    "four bands here. Fast bands carry position (they change from one key to the next), slow bands "
    "content; the bands sum to the head's scores."
)
SIDE = (
    "The same text through two models: their tokenizers cut it differently, so tokens are "
    "lined up by the characters they cover, and a group holds the tokens of each that end at "
    "the same character. A group's loss is the sum of its tokens' losses, which both models "
    "give for the same characters and so can be compared."
)
POST_NORM = (
    "**{name}** normalises the stream after every sub-layer (the 2017 paper's post-norm), so "
    "what reaches the output is no sum of parts and its logit cannot be split this way. Choose "
    "a pre-norm model (GPT-2, SmolLM2 and the Llama family) to see the split."
)

# Encoder-decoder models: the encoder reads a source, the decoder the output so far. Per
# bundled model: (source, the same source one word changed (as many tokens), the decoder's
# input so far (after its start token: the model's own greedy output's first word), the
# next token the clean source makes it write, the one the corrupted source makes it write).
ENCODER_DECODER_PRESETS = {
    "translate": (
        "the small cat sees a red ball",
        "the small dog sees a red ball",
        "le",
        " minou",
        " chenot",
    ),
    "reverse": ("a b c d e f g h", "a b c d e f g k", "", "h", "k"),
}
# Any other encoder-decoder model (Marian): an English sentence, the decoder's start token only.
OTHER_ENCODER_DECODER = (
    "The cat sees a red ball.",
    "The dog sees a red ball.",
    "",
    "",
    "",
)
ENCODER_TEXT = "The cat sat on the mat because it was tired."

SOURCE_LABEL = "Source (what the encoder reads)"
TEXT_LABEL = "Text (methods 2 to 6)"
TARGET_LABEL = "Decoder's input so far, after its start token (methods 2 to 5)"
ENCODER_LABEL = "Text the encoder reads (method 5)"

ENCODER_DECODER = (
    "**{name}** is an encoder-decoder model: the encoder reads the source, the decoder writes "
    "the output one token at a time. Every method here follows the decoder's next token with "
    "the source held fixed; patching compares two sources one word apart (its clean and "
    "corrupted prompts are sources), the decoder's input the same in both runs."
)
# Why each method needs a next-token prediction, for a model that makes none.
ENCODER_ONLY = {
    "patching": (
        "**{name}** is an encoder-only model: it turns a text into one vector per token (for "
        "search and similarity) and predicts no next token, so there are no answer logits "
        "whose difference a patch could restore. Patching needs a model with a decoder."
    ),
    "ablation": (
        "**{name}** is an encoder-only model: it has no next-token loss to measure a head's "
        "removal against (it was trained to make similar sentences' vectors close, and ships "
        "no output layer over the vocabulary). Ablation here needs a model with a decoder."
    ),
    "logit": (
        "**{name}** is an encoder-only model: it ends with token vectors, not logits over a "
        "vocabulary, so there is no next token's logit to split into parts."
    ),
    "input": (
        "**{name}** is an encoder-only model: input attribution here explains a next token's "
        "logit, and this model computes no logits, only one vector per token."
    ),
    "side": (
        "**{name}** does not continue text (it is {architecture}): side by side compares two "
        "models predicting the next token of the same text. Choose two models that continue "
        "text (the bundled continue, GPT-2, SmolLM2, the Llama family)."
    ),
}
SCORES_ENCODER = (
    " Here the head is in the encoder, which reads the whole text at once (no mask). Its "
    "embedding adds a token-type vector and normalises the sum before layer 1, so even there "
    "part of the stream is neither token nor position: the earlier-layers part."
)
