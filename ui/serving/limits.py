"""Every limit the app sets on a request, in one place (tests lower them to check they hold).

Handlers read them as ``limits.NAME`` at call time, so a changed value takes effect at once.
"""

from __future__ import annotations

import os

from transformer.text.tokenization import MAX_TOKENIZER_JSON_BYTES


def _setting(name: str, default: int) -> int:
    """The whole number the environment variable ``name`` sets, else ``default``."""
    given = os.environ.get(name, "").strip()
    if not given:
        return default
    try:
        value = int(given)
    except ValueError:
        raise ValueError(
            f"{name} must be a whole number, such as {default}; got {given!r}"
        ) from None
    if value < 1:
        raise ValueError(f"{name} must be at least 1, such as {default}; got {value}")
    return value


def machine_memory(
    limits_files: tuple[str, ...] = (
        "/sys/fs/cgroup/memory.max",  # a container's limit (cgroup v2), as on a Space
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
    ),
) -> int:
    """Bytes of memory this process may use: its container's limit where one is set and is
    below the machine's memory, else the machine's (16 GiB where neither can be read)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        physical = 16 * 2**30
    for path in limits_files:
        try:
            with open(path, encoding="ascii") as limit:
                text = limit.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < physical:
            return int(text)
    return physical


MACHINE_BYTES = machine_memory()


# Characters the tokenize tab accepts (the library's own limit is higher), counted as typed and
# again after the tokenizer's normaliser, for every kind of tokenizer: NFKC writes U+FDFA as 18
# characters, and 20,000 of them kept two requests past 10 s.
MAX_TEXT = 20_000
# The word /learn_bpe segments: a word, not a text (a 10 MB one answered 50 million characters).
MAX_BPE_WORD = 100
MAX_UPLOAD_BYTES = min(MAX_TOKENIZER_JSON_BYTES, 20 * 1024 * 1024)
# What the upload route lets in (ui/serving/uploads.py): one request carries one file and its form; the
# live uploads of one visitor, and of everyone, stay under these totals; a file no request has
# read for UPLOAD_IDLE_S is deleted.
UPLOAD_REQUEST_BYTES = MAX_UPLOAD_BYTES + 64 * 1024
UPLOAD_VISITOR_BYTES = 50 * 1024 * 1024
UPLOAD_TOTAL_BYTES = 500 * 1024 * 1024
UPLOAD_IDLE_S = 900.0
# A request's head (its first line and headers) must arrive within REQUEST_HEAD_TIMEOUT_S of the
# connection's start or of the previous answer, and its body within REQUEST_BODY_TIMEOUT_S plus
# its length at REQUEST_BODY_MIN_RATE bytes a second (a 20 MB upload: 30 s + 5 min), else the
# client is answered 408 and the connection closed (ui/serving/clients.py): a client that sends
# a byte a second would otherwise hold its connection for ever.
REQUEST_HEAD_TIMEOUT_S = 20.0
REQUEST_BODY_TIMEOUT_S = 30.0
REQUEST_BODY_MIN_RATE = 64 * 1024
# Tokenizer work for one request: past this the request is answered with a message. An
# uploaded tokenizer.json runs only in one of TOKENIZER_WORKERS worker processes, which is
# killed at this limit (and replaced); the app's own tokenizers run on as many threads, where
# work past the limit finishes on its thread (it is known not to run away).
TOKENIZER_TIME_LIMIT_S = 10.0
TOKENIZER_WORKERS = 2
# Building a real vocabulary (GPT-4's cl100k_base: 1.5 s on a quiet 2-core CPU, several times
# that on a busy one) happens once per server and is not the text's work: it has a limit of
# its own, and the text's limit starts after it.
TOKENIZER_BUILD_LIMIT_S = 60.0
# Each worker process that runs an uploaded tokenizer may map this much memory (GPT-2's
# tokenizer encoding 20,000 characters maps about 125 MiB) and use this much CPU time a request.
SANDBOX_MEMORY_BYTES = 1024 * 1024 * 1024
SANDBOX_CPU_S = 20
# Rows of the token table sent (the rest are counted in its last row), so that /tokenize on
# MAX_TEXT characters answers in well under 3 MB.
MAX_TABLE_ROWS = 1_000
# Wall-clock limits, so that one visitor's request cannot hold a worker (or the trainer) for long.
GENERATION_TIME_LIMIT_S = 60.0  # "Run to the end" pauses there; Run again continues
TRAINING_TIME_LIMIT_S = 300.0  # training stops there and keeps what it has learned
# Requests waiting at once in gradio's queue, all events together (those running are not
# counted); one more is answered "Queue is full" at once. Sized for a class: when a lecturer's
# view changes, each page that follows it queues within two seconds the draw of the view's
# tab, and for some tabs its settling and Generate's replay of the steps (ui/links/rooms.py;
# the poll itself is not queued), so CLASS_SIZE followers put up to 3 × CLASS_SIZE events in
# the queue at once, and 64 more are left for the other visitors' clicks (gradio runs 40 at a
# time).
# Still a bound: past it a public Space is being flooded, and a prompt refusal beats an answer
# minutes late. The environment variable VISUALISER_QUEUE_SIZE sets another (a bigger class).
CLASS_SIZE = 100
QUEUE_SIZE = _setting("VISUALISER_QUEUE_SIZE", 3 * CLASS_SIZE + 64)
# Analyses kept for shared models, counted by every tensor they hold; their attention weights
# are computed again when a view reads them, not held (MiniLM's at 508 tokens holds 31 MB a
# sentence, SmolLM2's at 534 tokens 164 MB). An analysis bigger than the bound is kept alone,
# and dropped when the next one starts, so that two are never held at once. Sized for the
# machine: 192 MB on one of 12 GB or more (a free CPU Space has 16 GB), 1/64 of a smaller one.
CACHE_BYTES = min(192 * 1024 * 1024, MACHINE_BYTES // 64)
# Layer and head sliders are built with these bounds, so that an API call (a new session, which
# gradio checks against the sliders as built) may name any layer or head of any model the app
# serves; the page narrows them to the chosen model's own when it loads, and the handlers check
# them against the model with a message.
MAX_LAYERS = 48
# Tokens the Attention tab's long-input view reads (SmolLM2 reads 8,192): at 2,000 its reduced
# pass keeps about 400 MB (all 270 heads' (T, T) weights would be 4.3 GB).
MAX_SCALE_TOKENS = 2_048
MAX_HEADS = 64
# Views shared by every session (ui/serving/shared_views.py), counted by their figures' JSON: a
# lecture's presets, computed once (the largest answer, SmolLM2's one-head view at 512 tokens,
# is 2.6 MB). Sized for the machine: 128 MB on one of 16 GB or more, 1/128 of a smaller one.
SHARED_VIEW_BYTES = min(128 * 1024 * 1024, MACHINE_BYTES // 128)
SHARED_VIEW_ENTRIES = 512
# An analysis or shared view nobody has read for this long is dropped (checked with the
# sessions, every 10 s): the bounds above are for a class at work; a class that typed its own
# sentences and left would otherwise leave them full, and the server hundreds of MB above where
# it was before the lesson. The lecturer's presets, read again, are computed again (one pass).
CACHE_UNUSED_S = 60.0
# A model pass's cost is estimated as parameters × tokens (ui/serving/costly.py). From
# COSTLY_PASS_COST (SmolLM2 over about 440 tokens, some 0.7 s on a 2-core CPU; an 8-billion-
# parameter model over about 7; never MiniLM or a bundled model) an
# uncached pass asked for by a cheap event runs in the costly pool, one at a time on a CPU, where
# at most COSTLY_PASS_CAPACITY requests wait (those running included; one more is told to try
# again); over MAX_PASS_COST (SmolLM2 over about 3,700 tokens, an 8-billion-parameter model over
# about 60) a pass is refused. A GPU takes GPU_PASS_SPEEDUP times more before either.
COSTLY_PASS_COST = 6 * 10**10
MAX_PASS_COST = 5 * 10**11
GPU_PASS_SPEEDUP = 50.0
COSTLY_PASS_CAPACITY = 4
# A generation is weighed before its first step by what it will hold at its end: its key/value
# cache (beams × positions × layers × 2 × key/value heads × head width, in the weights' dtype)
# and its steps' records (each step's attention row over every head of every layer). One over
# MAX_DECODING_BYTES is refused with what to change (SmolLM2: 5 beams of 512 new tokens hold
# about 262 MB; 3 beams of 128 about 27 MB); every session's together are kept within
# DECODINGS_BYTES, the least recently used let go past it (their sessions start again from the
# prompt at their next step). Sized for the machine: 256 MB and 1 GB on one of 16 GB or more.
MAX_DECODING_BYTES = min(256 * 1024 * 1024, MACHINE_BYTES // 64)
DECODINGS_BYTES = min(1024 * 1024 * 1024, MACHINE_BYTES // 16)
# Calls one client (an address as the server sees it) may have waiting in the costly queue
# (Run to the end, the long view); one more is refused with a message. The queue serves
# clients in turns (ui/serving/fairness.py). A lecture hall behind one router is one address,
# so the default leaves room for a class of 64 pressing Run to the end at once;
# VISUALISER_COSTLY_QUEUED_PER_CLIENT sets another number.
COSTLY_QUEUED_PER_CLIENT = _setting("VISUALISER_COSTLY_QUEUED_PER_CLIENT", 64)
# Threads that run the handlers (gradio's own pool). Gradio's default, 40, shares the web
# server's pool of 40 with its plain routes (/gradio_api/info, /config, uploads, heartbeats):
# handlers sleeping on a session's lock or the costly pool then held every thread, and /info
# waited for one. Any other number gives the handlers a pool of their own.
HANDLER_THREADS = 48
