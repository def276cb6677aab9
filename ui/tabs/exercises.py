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

Each handler is ``handler(store, request)`` (``pick``: the model registry first), made by
:func:`ui.serving.endpoints.takes_request` from a record of ``exercises_request.py`` that
reads the controls' values once; what it refuses is said on the page, never in a pop-up.
"""

from __future__ import annotations

import functools
import logging
import secrets
from typing import Any

import gradio as gr

from transformer.figures.exercises import class_figure, exercise_figure
from transformer.lab.exercises import BANK, Asked

from ..links.exercises import ExerciseStore
from ..links.rooms import POLL_S, RoomError, RoomStore, RoomsUnavailable, normal_code
from ..serving.endpoints import takes_request
from ..serving.export import EXPORTS
from .exercises_request import (
    ApiAnswer,
    AskRequest,
    Hosting,
    LecturerPage,
    PageAnswer,
    RoomAsk,
    RoomCode,
    StudentPage,
)

log = logging.getLogger("visualiser")

LECTURER_TICK_S = 0.5  # how often the lecturer's page reads the count of answers (one page: cheap)

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


@takes_request(PageAnswer.of)
def submit(store: ExerciseStore, request: PageAnswer) -> tuple:
    """The student's answer: ``(state, result, figure, score, score line)``. Alone: the
    figure, the model's answer and theirs, the score; in a room: recorded for the tally."""
    skip = gr.skip()
    if request.refused:
        return skip, request.refused, skip, skip, skip
    choice, state = request.choice, request.state
    if state["mode"] == "room":
        try:
            store.answer(state["code"], state["round"], request.student, choice)
        except RoomsUnavailable as error:
            return skip, f"⚠️ {error}: answer again in a moment.", skip, skip, skip
        except RoomError as error:
            return skip, f"⚠️ {error}.", skip, skip, skip
        state = {**state, "mine": choice}
        line = f"Your answer **{choice}** is in. The figure comes when the lecturer reveals it."
        return state, line, skip, skip, skip
    asked = state["asked"]
    score = dict(request.score or {"answered": 0, "right": 0, "done": []})
    done = list(score.get("done", []))
    if asked["exercise_id"] not in done:  # the first answer to an exercise counts
        done.append(asked["exercise_id"])
        score["answered"] = score.get("answered", 0) + 1
        score["right"] = score.get("right", 0) + (choice == asked["answer"])
        score["done"] = done
    state = {**state, "answered": True}
    return state, verdict(asked, choice), _plot(asked), score, score_line(score)


# -- a room: the lecturer ------------------------------------------------------------------


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


def _ask_room(store: ExerciseStore, request: RoomAsk) -> tuple:
    """The room asked ``request``'s exercise: the lecturer's page, or the refusal said."""
    if request.asked is None:
        return _failed(request.refused)
    room = request.room
    try:
        round_ = store.start(room.code, room.secret, request.asked.to_dict())
    except RoomError as error:
        return _failed(str(error))
    return _lecturer_view(round_.number, request.asked, room.code)


@takes_request(RoomAsk.bank, optional=True)
def start_room(store: ExerciseStore, request: RoomAsk) -> tuple:
    """The lecturer asks the room an exercise of the bank: ``(state, question, choices,
    result, figure, class figure, tally, timer)``."""
    return _ask_room(store, request)


@takes_request(RoomAsk.view, optional=True)
def start_view(store: ExerciseStore, request: RoomAsk) -> tuple:
    """The lecturer asks the room about the view it shows now (Attention: where the head
    looks most from the last token; Generate: the next token). ``tabs``: the app's
    ``Views.tabs``, whose defaults fill what a view's link leaves out."""
    return _ask_room(store, request)


def tally_line(total: int, counts: dict[str, int] | None = None, answer: str | None = None) -> str:
    """The lecturer's count of answers; once revealed, how many chose the model's answer."""
    line = f"**{total}** answer{'s' if total != 1 else ''} so far."
    if answer is not None:
        right = (counts or {}).get(answer, 0)
        line = f"**{total}** answers; **{right}** chose the model's answer, **{answer}**."
    return line


@takes_request(LecturerPage.of)
def lecturer_tick(store: ExerciseStore, page: LecturerPage) -> Any:
    """Every second on the lecturer's page: the count of answers."""
    if not page.code:
        return gr.skip()
    try:
        tally = store.tally(page.code)
    except RoomError:
        return gr.skip()
    if tally is None or tally.round != page.round:
        return gr.skip()
    # A tick that ends after the reveal says what the reveal said.
    return tally_line(tally.total, tally.counts, tally.answer)


@takes_request(Hosting.of)
def reveal(store: ExerciseStore, room: Hosting) -> tuple:
    """Reveal: ``(result, figure, class figure, tally, timer)`` on the lecturer's page; the
    followers' pages show it at their next look."""
    skip = gr.skip()
    if room.refused:
        return f"⚠️ {room.refused}", skip, skip, skip, skip
    try:
        round_ = store.reveal(room.code, room.secret)
        tally = store.tally(room.code)
    except RoomError as error:
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


@takes_request(Hosting.of)
def export(store: ExerciseStore, room: Hosting) -> tuple:
    """The room's answers as a CSV file: ``(file, result)``."""
    if room.refused:
        return gr.skip(), f"⚠️ {room.refused}"
    try:
        text = store.export(room.code, room.secret)
    except RoomError as error:
        return gr.skip(), f"⚠️ {error}"
    # With the views' exports: bounded by count, size and age.
    path = EXPORTS.write(f"answers-{room.code}.csv", text)
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


@takes_request(StudentPage.of)
def student_tick(store: ExerciseStore, page: StudentPage) -> tuple:
    """Every two seconds on a student's page in a room: a new question is asked, or the
    answer revealed. ``(state, question, choices, result, figure, class figure, accordion,
    timer)``, each skipped when nothing changed."""
    skip = gr.skip()
    nothing = (skip,) * 8
    code, student = page.code, page.student
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
    state = page.state
    fresh = not page.shows(round_.number)
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


@takes_request(ApiAnswer.of)
def exercise_answer(store: ExerciseStore, request: ApiAnswer) -> dict:
    """Answer the question room ``room`` asks now, as ``student`` (any id the client keeps):
    ``{"round", "seconds"}``, or ``{"error"}``."""
    if request.room.refused:
        return {"error": request.room.refused}
    code = request.room.code
    try:
        round_ = store.current(code)
        if round_ is None:
            return {"error": "this room has asked no question yet"}
        seconds = store.answer(code, round_.number, request.student, request.answer)
    except RoomError as error:
        return {"error": str(error)}
    return {"round": round_.number, "seconds": round(seconds, 2)}


@takes_request(RoomCode.of)
def exercise_tally(store: ExerciseStore, room: RoomCode) -> dict:
    """The question room ``room`` asks now and its answers: ``{"round", "question",
    "choices", "revealed", "total", "counts", "answer"}`` (the answer once revealed), or
    ``{"error"}``."""
    if room.refused:
        return {"error": room.refused}
    try:
        round_ = store.current(room.code)
        tally = store.tally(room.code)
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
            [follow_me.hosting],
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
