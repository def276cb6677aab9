"""Exercises on the page: predict what the model will do, then see it.

Alone, a student picks an exercise of the bank (``transformer/lab/exercises.py``); with
*Predict first* the figure stays hidden until they answer, then shows beside the model's
answer, theirs and the explanation, and the page keeps their score.

In a room (follow me, ``ui/links/rooms.py``), the lecturer asks the room an exercise of the
bank, or about the view the room shows now (Attention's head, Generate's step): every
follower's page asks it, the lecturer's page counts the answers as they arrive, and on
*Reveal* shows the class's answers beside the model's; the followers' pages then show the
figure, the class's answers and their own. The answers live in the room's store
(``ui/links/exercises.py``), so any process of a class counts them. A student's page keeps a
random id and the room in the browser: a reload answers as the same student and shows the
answer it gave. ``/exercise_answer`` and ``/exercise_tally`` serve clients that are not pages.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gradio as gr

from transformer.figures.exercises import class_figure, exercise_figure
from transformer.lab.exercises import (
    BANK,
    BY_ID,
    Asked,
    Exercise,
    ExerciseError,
    ask,
    exercise,
    view_exercise,
)
from transformer.text.real_tokenizers import REAL_TOKENIZERS, load_real_tokenizer

from ..links.exercises import ExerciseStore
from ..links.rooms import POLL_S, RoomError, RoomStore, RoomsUnavailable, normal_code, view_params
from ..links.share import decode_view
from ..serving.endpoints import takes_request
from ..serving.export import EXPORTS

log = logging.getLogger("visualiser")

LECTURER_TICK_S = 0.5  # how often the lecturer's page reads the count of answers (one page: cheap)
ASKED_CACHE = 64  # bank exercises asked of the bundled models, kept per process

KIND_NAMES = {
    "attention": "Attention",
    "next_token": "Next token",
    "probability": "Probability",
    "lens": "Logit lens",
    "subwords": "Subwords",
    "positions": "Positions",
    "mistake": "Seeds' mistakes",
    "what_if": "What if",
}

# A follower's page is read-only while it follows (rooms.READ_ONLY_JS makes all but the
# follow-me accordion inert); the exercises' panel, where the student answers, is given back.
# Run after that script (a moment later), whenever the code followed changes.
KEEP_INTERACTIVE_JS = """
(code) => {
  setTimeout(() => {
    const panel = document.getElementById("exercises");
    let node = panel;
    while (node && node !== document.body) {
      if (node.hasAttribute("data-follow-inert")) {
        node.inert = false;
        node.removeAttribute("data-follow-inert");
      }
      node = node.parentElement;
    }
  }, 60);
  return [];
}
"""


def bank_choices() -> list[tuple[str, str]]:
    """The exercise menu: ``(label, id)`` per exercise of the bank."""
    return [
        (f"{KIND_NAMES.get(e.kind, e.kind)} · {e.model} · {e.text or 'positions'}", e.id)
        for e in BANK
    ]


class _AskedCache:
    """Bank exercises asked of a shared model, by (exercise, model): each computed from the
    model the first time it is asked in this process (bundled models never change)."""

    def __init__(self, size: int = ASKED_CACHE) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[str, str], Asked] = OrderedDict()

    def get(self, key: tuple[str, str]) -> Asked | None:
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
        return found

    def put(self, key: tuple[str, str], asked: Asked) -> None:
        self._kept[key] = asked
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)


ASKED = _AskedCache()


def ask_exercise(registry: Any, item: Exercise, session: Any = None) -> Asked:
    """``item`` asked of its model, read from ``registry`` (a ``ModelRegistry``; a real
    tokenizer by name for a subwords question); :class:`ExerciseError` with a clear message."""
    key = (item.id, item.model)
    bank = BY_ID.get(item.id) is item
    if bank and (found := ASKED.get(key)) is not None:
        return found
    if item.kind == "subwords" and item.model in REAL_TOKENIZERS:
        asked = ask(item, None, load_real_tokenizer(item.model))
    else:
        try:
            checkpoint = registry.checkpoint(item.model, session)
        except (ValueError, RuntimeError) as error:
            raise ExerciseError(str(error)) from None
        try:
            asked = ask(item, checkpoint.model, checkpoint.tokenizer)
        except ExerciseError:
            raise
        except ValueError as error:
            raise ExerciseError(f"this exercise cannot be asked here: {error}") from None
    if bank:
        ASKED.put(key, asked)
    return asked


@dataclass(frozen=True)
class AskRequest:
    """The exercise the menu names, read once: looked up in the bank and asked of its model
    (``asked``), or why it cannot be (``refused``, said on the page where the question would
    stand); and whether the student predicts first."""

    asked: Asked | None
    refused: str = ""
    predict_first: bool = False

    @classmethod
    def of(
        cls, registry: Any, exercise_id: Any, predict_first: Any = False, session: Any = None
    ) -> AskRequest:
        """The request for the menu's ``exercise_id``; never raises: an exercise that cannot
        be asked is a refused request."""
        try:
            asked = ask_exercise(registry, exercise(exercise_id), session)
        except ExerciseError as error:
            return cls(None, str(error), bool(predict_first))
        return cls(asked, "", bool(predict_first))


def _plot(asked: Asked | dict[str, Any]) -> Any:
    found = asked if isinstance(asked, Asked) else Asked.from_dict(asked)
    return gr.Plot(exercise_figure(found), visible=True)


def _hidden_plot() -> Any:
    return gr.Plot(None, visible=False)


def score_line(score: dict[str, int] | None) -> str:
    """The student's score line."""
    score = score or {}
    answered, right = score.get("answered", 0), score.get("right", 0)
    if not answered:
        return ""
    return f"**Your score:** {right} right of {answered} answered."


def verdict(asked: dict[str, Any], mine: str | None) -> str:
    """What a student reads once the answer is shown: the model's answer, theirs, whether
    they agree, and the explanation."""
    answer = asked.get("answer")
    lines = [f"**The model's answer:** {answer}"]
    if mine:
        right = "✅ right" if mine == answer else "❌ not this time"
        lines.append(f"**Your answer:** {mine} — {right}")
    lines.append(str(asked.get("explanation", "")))
    return "\n\n".join(lines)


# -- alone -------------------------------------------------------------------------------


@takes_request(AskRequest.of, optional=True)
def pick(registry: Any, request: AskRequest) -> tuple:
    """Ask the exercise ``exercise_id``: ``(state, question, choices, result, figure,
    class figure)``; with ``predict_first`` the figure waits for the answer."""
    asked, predict_first = request.asked, request.predict_first
    if asked is None:
        return (None, f"⚠️ {request.refused}", gr.Radio(choices=[], value=None), "",
                _hidden_plot(), _hidden_plot())  # fmt: skip
    state = {"mode": "alone", "asked": asked.to_dict(), "answered": False}
    figure = _hidden_plot() if predict_first else _plot(asked)
    return (
        state,
        asked.question,
        gr.Radio(choices=asked.choices, value=None, interactive=True, visible=True),
        "*Predict first: answer, then see the figure.*" if predict_first else "",
        figure,
        _hidden_plot(),
    )


def show_figure(state: dict | None, predict_first: bool) -> Any:
    """Predict first switched: the figure of an exercise asked alone hides until it is
    answered, or shows."""
    if not state or state.get("mode") != "alone":
        return gr.skip()
    if predict_first and not state.get("answered"):
        return _hidden_plot()
    return _plot(state["asked"])


def submit(
    store: ExerciseStore,
    choice: str | None,
    state: dict | None,
    score: dict | None,
    student: str,
) -> tuple:
    """The student's answer: ``(state, result, figure, score, score line)``. Alone: the
    figure, the model's answer and theirs, the score; in a room: recorded for the tally."""
    skip = gr.skip()
    if not state:
        return skip, "Pick an exercise first.", skip, skip, skip
    if not choice:
        return skip, "Choose an answer first.", skip, skip, skip
    if state.get("mode") == "room":
        try:
            store.answer(state["code"], state["round"], student, choice)
        except RoomsUnavailable as error:
            return skip, f"⚠️ {error}: answer again in a moment.", skip, skip, skip
        except RoomError as error:
            return skip, f"⚠️ {error}.", skip, skip, skip
        state = {**state, "mine": choice}
        line = f"Your answer **{choice}** is in. The figure comes when the lecturer reveals it."
        return state, line, skip, skip, skip
    if state.get("mode") != "alone":
        return skip, "The lecturer's page does not answer its own question.", skip, skip, skip
    asked = state["asked"]
    score = dict(score or {"answered": 0, "right": 0, "done": []})
    done = list(score.get("done", []))
    if asked["exercise_id"] not in done:  # the first answer to an exercise counts
        done.append(asked["exercise_id"])
        score["answered"] = score.get("answered", 0) + 1
        score["right"] = score.get("right", 0) + (choice == asked["answer"])
        score["done"] = done
    state = {**state, "answered": True}
    return state, verdict(asked, choice), _plot(asked), score, score_line(score)


# -- a room: the lecturer ------------------------------------------------------------------


def _hosting(hosting: Any) -> tuple[str, str]:
    code, secret = [*list(hosting or []), "", ""][:2]
    if not code:
        raise ExerciseError("host a room first (Follow a lecturer → Host a room)")
    return str(code), str(secret)


def _lecturer_view(round_number: int, asked: Asked, code: str) -> tuple:
    state = {"mode": "lecturer", "code": code, "round": round_number}
    question = f"**Asked room {code}:** {asked.question}\n\n" + "  ·  ".join(
        f"`{c}`" for c in asked.choices
    )
    return (
        state,
        question,
        gr.Radio(choices=[], value=None, visible=False),  # the lecturer does not answer
        "",
        _hidden_plot(),
        _hidden_plot(),
        "**0** answers so far.",
        gr.Timer(active=True),
    )


def _failed(message: str) -> tuple:
    skip = gr.skip()
    return skip, skip, skip, f"⚠️ {message}", skip, skip, skip, skip


def start_room(
    store: ExerciseStore, registry: Any, hosting: Any, exercise_id: str, session: Any = None
) -> tuple:
    """The lecturer asks the room an exercise of the bank: ``(state, question, choices,
    result, figure, class figure, tally, timer)``."""
    try:
        code, secret = _hosting(hosting)
        request = AskRequest.of(registry, exercise_id, session=session)
        if request.asked is None:
            return _failed(request.refused)
        round_ = store.start(code, secret, request.asked.to_dict())
    except (ExerciseError, RoomError) as error:
        return _failed(str(error))
    return _lecturer_view(round_.number, request.asked, normal_code(code))


def room_view(query: str, tabs: Mapping[str, Any] | None, registry: Any) -> dict[str, str]:
    """The values of the view a room shows (its link's ``query``), every control's value with
    the tab's defaults where the link leaves one out, as text; ``tab`` and ``step`` too."""
    params = view_params(query)
    found = {k: v[-1] for k, v in params.items()}
    if tabs is not None:
        view = decode_view(params, tabs, registry).view
        if view is not None:
            found = {k: str(v) for k, v in view["values"].items()}
            found["tab"] = view["tab"]
            found["step"] = str(view.get("step") or 0)
    return found


def start_view(
    store: ExerciseStore,
    rooms: RoomStore,
    registry: Any,
    hosting: Any,
    session: Any = None,
    tabs: Mapping[str, Any] | None = None,
) -> tuple:
    """The lecturer asks the room about the view it shows now (Attention: where the head
    looks most from the last token; Generate: the next token). ``tabs``: the app's
    ``Views.tabs``, whose defaults fill what a view's link leaves out."""
    try:
        code, secret = _hosting(hosting)
        _, query = rooms.latest(code)
        params = room_view(query, tabs, registry)
        item = view_exercise(params.get("tab", ""), params)
        asked = ask_exercise(registry, item, session)
        round_ = store.start(code, secret, asked.to_dict())
    except (ExerciseError, RoomError) as error:
        return _failed(str(error))
    return _lecturer_view(round_.number, asked, normal_code(code))


def tally_line(total: int, counts: dict[str, int] | None = None, answer: str | None = None) -> str:
    """The lecturer's count of answers; once revealed, how many chose the model's answer."""
    line = f"**{total}** answer{'s' if total != 1 else ''} so far."
    if answer is not None:
        right = (counts or {}).get(answer, 0)
        line = f"**{total}** answers; **{right}** chose the model's answer, **{answer}**."
    return line


def lecturer_tick(store: ExerciseStore, state: dict | None) -> Any:
    """Every second on the lecturer's page: the count of answers."""
    if not state or state.get("mode") != "lecturer":
        return gr.skip()
    try:
        tally = store.tally(state["code"])
    except RoomError:
        return gr.skip()
    if tally is None or tally.round != state["round"]:
        return gr.skip()
    # A tick that ends after the reveal says what the reveal said.
    return tally_line(tally.total, tally.counts, tally.answer)


def reveal(store: ExerciseStore, hosting: Any, state: dict | None) -> tuple:
    """Reveal: ``(result, figure, class figure, tally, timer)`` on the lecturer's page; the
    followers' pages show it at their next look."""
    skip = gr.skip()
    try:
        code, secret = _hosting(hosting)
        round_ = store.reveal(code, secret)
        tally = store.tally(code)
    except (ExerciseError, RoomError) as error:
        return f"⚠️ {error}", skip, skip, skip, skip
    assert tally is not None  # a round was revealed
    asked = round_.asked
    return (
        verdict(asked, None),
        _plot(asked),
        gr.Plot(class_figure(asked["choices"], tally.counts, asked["answer"]), visible=True),
        tally_line(tally.total, tally.counts, asked["answer"]),
        gr.Timer(active=False),
    )


def export(store: ExerciseStore, hosting: Any) -> tuple:
    """The room's answers as a CSV file: ``(file, result)``."""
    try:
        code, secret = _hosting(hosting)
        text = store.export(code, secret)
    except (ExerciseError, RoomError) as error:
        return gr.skip(), f"⚠️ {error}"
    # With the views' exports: bounded by count, size and age.
    path = EXPORTS.write(f"answers-{normal_code(code)}.csv", text)
    rows = max(0, text.count("\n") - 1)
    return gr.File(str(path), visible=True), f"Exported {rows} answer(s)."


# -- a room: a student -------------------------------------------------------------------


def joined(code: str) -> tuple:
    """The page follows room ``code`` ("" when it stopped): ``(room kept in the browser,
    timer)``."""
    code = normal_code(code)
    return code, gr.Timer(active=bool(code))


def opened(room: str, student: str) -> tuple:
    """When the page opens: ``(student id, timer)``; a page that answered a room's questions
    before a reload looks at that room again."""
    kept = isinstance(student, str) and 0 < len(student) <= 64 and student.isascii()
    student = student if kept and student.isprintable() else secrets.token_urlsafe(12)
    return student, gr.Timer(active=bool(normal_code(room)))


def student_tick(store: ExerciseStore, room: str, state: dict | None, student: str) -> tuple:
    """Every two seconds on a student's page in a room: a new question is asked, or the
    answer revealed. ``(state, question, choices, result, figure, class figure, accordion,
    timer)``, each skipped when nothing changed."""
    skip = gr.skip()
    nothing = (skip,) * 8
    code = normal_code(room)
    if not code:
        return (*nothing[:7], gr.Timer(active=False))
    try:
        round_ = store.current(code)
    except RoomsUnavailable:
        return nothing
    except RoomError:  # the room closed
        return (*nothing[:7], gr.Timer(active=False))
    if round_ is None:
        return nothing
    state = state if isinstance(state, dict) else {}
    fresh = not (
        state.get("mode") == "room"
        and state.get("code") == code
        and state.get("round") == round_.number
    )
    public = round_.public()
    if fresh:
        try:
            found = store.mine(code, round_.number, student) if student else None
        except RoomError:
            found = None
        new: dict[str, Any] = {"mode": "room", "code": code, "round": round_.number, "mine": found,
               "revealed": False}  # fmt: skip
        result = "*The lecturer asks: predict, then answer.*"
        if found:
            result = (
                f"Your answer **{found}** is in. The figure comes when the lecturer reveals it."
            )
        if not round_.revealed:
            return (
                new,
                f"**Room {code} asks:** {public['question']}",
                gr.Radio(choices=public["choices"], value=found, interactive=True, visible=True),
                result,
                _hidden_plot(),
                _hidden_plot(),
                gr.Accordion(open=True),
                skip,
            )
        state = new
        question: Any = f"**Room {code} asks:** {public['question']}"
    elif state.get("revealed") or not round_.revealed:
        return nothing
    else:
        question = skip
    # Revealed: the figure, the class's answers and theirs.
    mine = state.get("mine")
    try:
        tally = store.tally(code)
    except RoomError:
        return nothing
    counts = tally.counts if tally is not None else {}
    asked = round_.asked
    return (
        {**state, "revealed": True},
        question,
        gr.Radio(choices=asked["choices"], value=mine, interactive=False, visible=True),
        verdict(asked, mine),
        _plot(asked),
        gr.Plot(class_figure(asked["choices"], counts, asked["answer"], mine), visible=True),
        gr.Accordion(open=True),
        skip,
    )


# -- the API for clients that are not pages --------------------------------------------------


def exercise_answer(store: ExerciseStore, room: str, student: str, answer: str) -> dict:
    """Answer the question room ``room`` asks now, as ``student`` (any id the client keeps):
    ``{"round", "seconds"}``, or ``{"error"}``."""
    try:
        round_ = store.current(room)
        if round_ is None:
            return {"error": "this room has asked no question yet"}
        seconds = store.answer(room, round_.number, student, answer)
    except RoomError as error:
        return {"error": str(error)}
    return {"round": round_.number, "seconds": round(seconds, 2)}


def exercise_tally(store: ExerciseStore, room: str) -> dict:
    """The question room ``room`` asks now and its answers: ``{"round", "question",
    "choices", "revealed", "total", "counts", "answer"}`` (the answer once revealed), or
    ``{"error"}``."""
    try:
        round_ = store.current(room)
        tally = store.tally(room)
    except RoomError as error:
        return {"error": str(error)}
    if round_ is None or tally is None:
        return {"error": "this room has asked no question yet"}
    public = round_.public()
    return {
        "round": round_.number,
        "question": public["question"],
        "choices": public["choices"],
        "revealed": round_.revealed,
        **{k: v for k, v in tally.to_dict().items() if k != "round"},
    }


# -- the panel -----------------------------------------------------------------------------


class ExercisePanel:
    """The exercises' accordion, below the follow-me controls, and its events."""

    def __init__(self, registry: Any, rooms: RoomStore, store: ExerciseStore) -> None:
        self.registry, self.rooms, self.store = registry, rooms, store
        with gr.Accordion(
            "Exercises: predict, then see", open=False, elem_id="exercises"
        ) as self.accordion:
            with gr.Row():
                self.pick = gr.Dropdown(
                    bank_choices(), value=None, label="Exercise", scale=3, elem_id="exercise-pick"
                )
                self.predict_first = gr.Checkbox(
                    value=True,
                    label="Predict first (the figure waits for my answer)",
                    scale=1,
                    min_width=220,
                    elem_id="exercise-predict-first",
                )
            self.question = gr.Markdown(elem_id="exercise-question")
            self.choices = gr.Radio([], label="Your answer", elem_id="exercise-choices")
            self.answer = gr.Button(
                "Answer", variant="primary", size="sm", elem_id="exercise-answer"
            )
            self.result = gr.Markdown(elem_id="exercise-result")
            with gr.Row(equal_height=False):
                self.figure = gr.Plot(visible=False, label="The model", elem_id="exercise-figure")
                self.class_plot = gr.Plot(
                    visible=False, label="The class", elem_id="exercise-class"
                )
            self.score_line = gr.Markdown(elem_id="exercise-score")
            with gr.Row(elem_id="exercise-lecturer"):
                self.ask_room = gr.Button("Ask my room this exercise", size="sm")
                self.ask_view = gr.Button("Ask my room about this view", size="sm")
                self.reveal = gr.Button("Reveal", size="sm", elem_id="exercise-reveal")
                self.export = gr.Button("Export answers (CSV)", size="sm")
            self.tally = gr.Markdown(elem_id="exercise-tally")
            self.csv = gr.File(visible=False, label="Answers (CSV)")
        self.state = gr.State(None)
        self.score = gr.State(None)
        self.student = gr.BrowserState("", storage_key="visualiser-student")
        self.room = gr.BrowserState("", storage_key="visualiser-exercise-room")
        self.lecturer_timer = gr.Timer(LECTURER_TICK_S, active=False)
        self.student_timer = gr.Timer(POLL_S, active=False)

    def wire(self, demo: gr.Blocks, follow_me: Any, session: gr.State) -> None:
        """The events, with the follow-me controls' ``hosting`` (the lecturer's room) and
        ``followed`` (the code a student's page follows)."""
        private: dict[str, Any] = {"api_visibility": "private"}
        quiet: dict[str, Any] = {**private, "show_progress": "hidden"}
        store, registry = self.store, self.registry
        shown = [self.state, self.question, self.choices, self.result, self.figure]

        def answerable(handler: Any, on: bool) -> Any:
            # The lecturer's page does not answer its own question: no Answer button there.
            def with_button(*values: Any) -> tuple:
                out = handler(*values)
                failed = out[0] == gr.skip()  # a message instead: the page left as it was
                return (*out, gr.skip() if failed else gr.Button(visible=on))

            return with_button

        self.pick.change(
            answerable(functools.partial(pick, registry), True),
            [self.pick, self.predict_first, session],
            [*shown, self.class_plot, self.answer],
            **private,
        )
        self.predict_first.change(
            show_figure, [self.state, self.predict_first], [self.figure], **quiet
        )
        self.answer.click(
            functools.partial(submit, store),
            [self.choices, self.state, self.score, self.student],
            [self.state, self.result, self.figure, self.score, self.score_line],
            **private,
        )
        lecturer = [*shown, self.class_plot, self.tally, self.lecturer_timer, self.answer]
        self.ask_room.click(
            answerable(functools.partial(start_room, store, registry), False),
            [follow_me.hosting, self.pick, session],
            lecturer,
            **private,
        )
        tabs = getattr(getattr(demo, "views", None), "tabs", None)
        self.ask_view.click(
            answerable(
                functools.partial(start_view, store, self.rooms, registry, tabs=tabs), False
            ),
            [follow_me.hosting, session],
            lecturer,
            **private,
        )
        self.lecturer_timer.tick(
            functools.partial(lecturer_tick, store), [self.state], [self.tally], **quiet,
            queue=False,
        )  # fmt: skip
        self.reveal.click(
            functools.partial(reveal, store),
            [follow_me.hosting, self.state],
            [self.result, self.figure, self.class_plot, self.tally, self.lecturer_timer],
            **private,
        )
        self.export.click(
            functools.partial(export, store), [follow_me.hosting], [self.csv, self.result],
            **private,
        )  # fmt: skip
        # A student's page: it follows a room (or stops); after a reload it looks again at
        # the room it answered.
        follow_me.followed.change(
            joined, [follow_me.followed], [self.room, self.student_timer], **quiet
        )
        follow_me.followed.change(None, [follow_me.followed], None, js=KEEP_INTERACTIVE_JS)
        demo.load(opened, [self.room, self.student], [self.student, self.student_timer], **quiet)
        # Not queued, as follow me's poll: a tiny request answered at once.
        self.student_timer.tick(
            functools.partial(student_tick, store),
            [self.room, self.state, self.student],
            [*shown, self.class_plot, self.accordion, self.student_timer],
            **quiet,
            queue=False,
        )

        def answer_api(room: str, student: str, answer: str) -> dict:
            """Answer the question a room asks now (``{"round", "seconds"}`` or
            ``{"error"}``)."""
            return exercise_answer(store, room, student, answer)

        def tally_api(room: str) -> dict:
            """The question a room asks now and the count of its answers (the model's answer
            once revealed)."""
            return exercise_tally(store, room)

        # Not queued: a store's read or write, answered at once (a hundred students answering
        # within seconds through gradio's queue waited 20 s each on a 2-core CPU).
        gr.api(answer_api, api_name="exercise_answer", queue=False)
        gr.api(tally_api, api_name="exercise_tally", queue=False)
