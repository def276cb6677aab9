"""Links to a view: a tab and the values of its controls, written as URL query parameters (a
link that reopens the app as it was) and checked when read back.

A view is ``{"tab": slug, "values": {key: value}, "step": n | None}``; the keys are the ones a
tab's ``build(...)`` returns. Only values that differ from the tab's defaults go into a link,
so links stay short and readable: ``?tab=attention&model=translate&layer=2&head=3``. A bad
value (unknown model, layer past the end, a word for a number) falls back to the default with
a message, never an exception. ``ui.links.views`` applies a view to the page.
"""

from __future__ import annotations

import html
import logging
import math
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import gradio as gr

from ..serving.errors import readable_list
from ..serving.state import TRAINED_HERE, ModelRegistry

log = logging.getLogger("visualiser")

MAX_TEXT = 2_000  # characters of a text control kept from a link
MAX_QUERY = 8_000  # characters of a link's query string read at all (a longer one is refused)
MAX_SHOWN = 60  # characters of a link's own text quoted in a message
MAX_STEP = 1_000  # generation steps a link may ask for (clamped to the generation's end)
VALUE_TYPES = (gr.Textbox, gr.Dropdown, gr.Radio, gr.Slider, gr.Number, gr.Checkbox)
CHOICE_TYPES = (gr.Dropdown, gr.Radio, gr.CheckboxGroup)
# Some choices follow the model (which attentions it has): a link may name any of them.
CHOICES_BY_MODEL = {("attention", "kind"): ("ATTENTION_KINDS", "ui.tabs.attention.view")}


@dataclass
class TabView:
    """One tab: its label, id (``slug``), shareable controls and their build-time defaults."""

    label: str
    slug: str
    controls: dict[str, gr.Component]
    extra: dict[str, gr.Component] = field(default_factory=dict)  # state, step button
    defaults: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, label: str, slug: str, built: Mapping[str, gr.Component] | None) -> TabView:
        """Split what a tab's ``build`` returned into value controls and the rest."""
        controls: dict[str, gr.Component] = {}
        extra: dict[str, gr.Component] = {}
        for key, component in (built or {}).items():
            is_value = isinstance(component, (*VALUE_TYPES, gr.CheckboxGroup))
            (controls if is_value else extra)[key] = component
        for key, component in controls.items():
            if component.elem_id is None:  # so a tour stop can scroll to it
                component.elem_id = f"{slug}-{key}"
        defaults = {key: _default(c) for key, c in controls.items()}
        return cls(label, slug, controls, extra, defaults)


def _default(component: gr.Component) -> Any:
    value = component.value
    if isinstance(component, gr.CheckboxGroup):
        return list(value or [])
    if isinstance(component, (gr.Slider, gr.Number)) and value is not None:
        return _number(float(value), component)
    return value


def _number(value: float, component: gr.Component) -> float | int:
    """A slider's value on its step (an int for integer steps); a number box's at its precision."""
    step = getattr(component, "step", None)
    if isinstance(component, gr.Slider) and step:
        low = component.minimum or 0
        value = round(low + round((value - low) / step) * step, 10)  # 0.35, not 0.35000…03
        return round(value) if float(step).is_integer() and float(low).is_integer() else value
    if isinstance(component, gr.Number) and component.precision == 0:
        return round(value)
    return value


def _choices(component: gr.Dropdown | gr.Radio | gr.CheckboxGroup, tab: str, key: str) -> list[Any]:
    by_model = CHOICES_BY_MODEL.get((tab, key))
    if by_model is not None:
        import importlib

        name, module = by_model
        return list(getattr(importlib.import_module(module), name))
    return [choice[1] if isinstance(choice, tuple) else choice for choice in component.choices]


# -- one value ----------------------------------------------------------------------------------


def check_value(component: gr.Component, raw: list[str], tab: str = "", key: str = "") -> Any:
    """The value that the link's text ``raw`` (all values given for the key) names for
    ``component``; ``ValueError`` saying what is wrong when it is not a valid value."""
    if isinstance(component, gr.CheckboxGroup):
        allowed = _choices(component, tab, key)
        wrong = [v for v in raw if v not in allowed]
        if wrong:
            raise ValueError(
                f"{', '.join(map(_quote, wrong))} is not one of {_choices_text(allowed)}"
            )
        return [v for v in allowed if v in raw]
    text = raw[-1] if raw else ""
    if isinstance(component, gr.Dropdown) and getattr(component, "allow_custom_value", False):
        allowed = _choices(component, tab, key)
        if allowed and all(isinstance(v, int) and not isinstance(v, bool) for v in allowed):
            # Choices that follow the data (Inside a layer's query token: a position in the
            # link's own sentence): any position; the tab fits it to the sentence it shows.
            if not text.strip().isdigit() or len(text.strip()) > 6:
                raise ValueError(f"{_quote(text)} is not a token position (0, 1, 2, …)")
            return int(text.strip())
    if isinstance(component, CHOICE_TYPES):
        allowed = _choices(component, tab, key)
        if text not in allowed:
            raise ValueError(f"{_quote(text)} is not one of {_choices_text(allowed)}")
        return text
    if isinstance(component, gr.Checkbox):
        if text.lower() in {"1", "true", "on", "yes"}:
            return True
        if text.lower() in {"0", "false", "off", "no", ""}:
            return False
        raise ValueError(f"{_quote(text)} is not 1 or 0")
    if isinstance(component, (gr.Slider, gr.Number)):
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{_quote(text)} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"{_quote(text)} is not a finite number")
        low, high = component.minimum, component.maximum
        if (low is not None and number < low) or (high is not None and number > high):
            raise ValueError(f"{number:g} is outside {low:g} to {high:g}")
        return _number(number, component)
    if isinstance(component, gr.Textbox):
        if len(text) > MAX_TEXT:
            raise ValueError(f"the text is longer than {MAX_TEXT:,} characters")
        return text
    raise ValueError(f"a {type(component).__name__} cannot be set from a link")


def _slider_number(component: Any, raw: list[str]) -> float | None:
    """The finite number a slider's link value holds (out of range or not), else None."""
    if not isinstance(component, gr.Slider) or not raw:
        return None
    try:
        number = float(raw[-1])
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _quote(text: str) -> str:
    """The link's own ``text`` quoted in a message: at most ``MAX_SHOWN`` characters, one line."""
    text = " ".join(str(text).split())
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…")


def _choices_text(allowed: list[Any]) -> str:
    """The choices for a message, each quoted: ``'a', 'b' or 'c'`` (not a Python list)."""
    return readable_list([_quote(choice) for choice in allowed])


def _shown(value: Any) -> str:
    """A default value as a message names it (an empty choice list is "none")."""
    texts = _as_text(value)
    return ", ".join(map(repr, texts)) if texts else "none"


_MARKDOWN_PUNCTUATION = set(string.punctuation) - {"&", "<", ">"}


def as_plain_markdown(text: str) -> str:
    """``text`` written so that Markdown shows it as it is: every ASCII punctuation mark
    backslash-escaped (no link, image, emphasis, code span or autolinked address can form) and
    ``&``, ``<``, ``>`` as entities (no HTML); one line."""
    out = []
    for char in " ".join(str(text).split()):
        if char in "&<>":
            out.append(html.escape(char))
        elif char in _MARKDOWN_PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _as_text(value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["1" if value else "0"]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return [str(int(value))]
    return ["" if value is None else str(value)]


# -- a whole view -------------------------------------------------------------------------------


def encode_view(tab: TabView, values: Mapping[str, Any], step: int | None = None) -> str:
    """The query string (no ``?``) naming ``tab`` with those of ``values`` that differ from its
    defaults, and the generation ``step`` when one is given."""
    pairs: list[tuple[str, str]] = [("tab", tab.slug)]
    for key, component in tab.controls.items():
        if key not in values:
            continue
        value = values[key]
        if isinstance(component, (gr.Slider, gr.Number)) and value is not None:
            value = _number(float(value), component)
        if value == tab.defaults.get(key):
            continue
        pairs.extend((key, text) for text in _as_text(value))
    if step is not None and step > 0:
        pairs.append(("step", str(int(step))))
    return urlencode(pairs)


@dataclass
class Restored:
    """What a link asked for, checked: the view to apply and what had to be changed."""

    view: dict[str, Any] | None
    messages: list[str]


def _model_limits(registry: ModelRegistry | None, name: Any) -> tuple[int, int] | None:
    """(layers, heads) of a model (the larger of its stacks), or None when unknown."""
    if registry is None or not isinstance(name, str) or name == TRAINED_HERE:
        return None
    try:
        config = registry.checkpoint(name, None).config
    except Exception:  # an unloadable model is reported by the model check
        return None
    return max(config.n_encoder_layers, config.n_decoder_layers), config.n_heads


def _model_stacks(registry: ModelRegistry | None, name: Any) -> list[str]:
    """The stacks (``encoder``, ``decoder``) a model has, or [] when unknown."""
    if registry is None or not isinstance(name, str) or name == TRAINED_HERE:
        return []
    try:
        config = registry.checkpoint(name, None).config
        has = {"encoder": config.has_encoder, "decoder": config.has_decoder}
    except Exception:  # an unloadable model is reported by the model check
        return []
    return [stack for stack, present in has.items() if present]


def _model_kinds(registry: ModelRegistry | None, name: Any) -> list[str]:
    """The attention kinds (the Attention tab's labels) a model has, or [] when unknown."""
    # The tab's own rule, imported here: the tabs' modules import this module's users.
    from ..tabs.attention.view import kinds_for

    if registry is None or not isinstance(name, str) or name == TRAINED_HERE:
        return []
    try:
        config = registry.checkpoint(name, None).config
    except Exception:  # an unloadable model is reported by the model check
        return []
    return kinds_for(config)


def decode_view(
    params: Mapping[str, Iterable[str]],
    tabs: Mapping[str, TabView],
    registry: ModelRegistry | None = None,
) -> Restored:
    """The view that query ``params`` (key → values) name; every value is checked and a bad
    one falls back to the tab's default with a message (never an exception). No ``tab``
    parameter: nothing to restore (``view`` is None)."""
    lists = {key: [str(v) for v in values] for key, values in params.items()}
    if "tab" not in lists:
        return Restored(None, [])
    slug = lists["tab"][-1]
    if slug not in tabs:
        known = ", ".join(tabs)
        return Restored(
            None, [f"This link names a tab {_quote(slug)} that this app lacks ({known})."]
        )
    tab = tabs[slug]
    values = dict(tab.defaults)
    messages = []
    refused: dict[str, int] = {}  # a refused key → the index of its message
    outside: dict[str, float] = {}  # a layer or head past its slider's range → the number
    for key, raw in lists.items():
        if key in {"tab", "step"}:
            continue
        if key not in tab.controls:
            messages.append(f"{_quote(key)} is not a control of the {tab.label} tab: ignored.")
            continue
        component = tab.controls[key]
        if isinstance(component, gr.CheckboxGroup):
            # Each value stands alone: an unknown one is dropped, the others are kept.
            allowed = _choices(component, slug, key)
            kept = [v for v in raw if v in allowed]
            wrong = [v for v in raw if v not in allowed]
            values[key] = check_value(component, kept, slug, key)
            if wrong:
                messages.append(
                    f"{tab.label} › {key}: {', '.join(map(_quote, wrong))} is not one of "
                    f"{_choices_text(allowed)}: left out."
                )
            continue
        try:
            values[key] = check_value(component, raw, slug, key)
        except ValueError as error:
            # What is shown instead is said once the model has fitted the values (below).
            refused[key] = len(messages)
            messages.append(f"{tab.label} › {key}: {error}")
            number = _slider_number(component, raw)
            if key in ("layer", "head") and number is not None:
                outside[key] = number
    limits = _model_limits(registry, values.get("model"))
    if limits is not None:
        for key, high in zip(("layer", "head"), limits, strict=True):
            if key in outside:  # past the slider's own range: say the model's real one
                low = int(getattr(tab.controls[key], "minimum", None) or 1)
                shown = min(max(round(outside[key]), low), high)
                messages[refused.pop(key)] = (
                    f"{tab.label} › {key}: {outside[key]:g} is outside {low} to {high} "
                    f"({values['model']} has {high}); showing {shown}."
                )
                values[key] = shown
                continue
            if key in values and isinstance(values[key], (int, float)) and values[key] > high:
                messages.append(
                    f"{tab.label} › {key} {values[key]}: {values['model']} has {high}; "
                    f"showing {high}."
                )
                values[key] = high
    stacks = _model_stacks(registry, values.get("model"))
    if stacks and values.get("stack") not in (None, *stacks):
        if "stack" in lists and "stack" not in refused:  # asked for by name: say so
            messages.append(
                f"{tab.label} › stack {_quote(values['stack'])}: {values['model']} has "
                f"{' and '.join(stacks)}; showing {stacks[0]}."
            )
        values["stack"] = stacks[0]
    kinds = _model_kinds(registry, values.get("model")) if "kind" in tab.controls else []
    if kinds and values.get("kind") not in kinds:
        if "kind" in lists and "kind" not in refused:  # asked for by name: say so
            messages.append(
                f"{tab.label} › kind {_quote(values['kind'])}: {values['model']} has "
                f"{' and '.join(map(_quote, kinds))}; showing {_quote(kinds[0])}."
            )
        values["kind"] = kinds[0]
    for key, index in refused.items():
        messages[index] += f"; showing {_shown(values[key])}."
    step = None
    if "step" in lists:
        try:
            step = int(lists["step"][-1])
            if not 0 < step <= MAX_STEP:
                raise ValueError
        except ValueError:
            messages.append(
                f"step {_quote(lists['step'][-1])} is not a whole number from 1 to {MAX_STEP}."
            )
            step = None
    return Restored({"tab": slug, "values": values, "step": step}, messages)
