"""What the Exercises panel's controls ask for, read once.

Gradio hands a handler its input components' values in order (those of a record's ``of``);
:func:`ui.serving.endpoints.takes_request` turns them into one record the moment the handler
starts, which gets the room's exercise store first and then that record. A record holds the
values read and checked: a room code as the rooms keep it, the lecturer's room and secret,
the page's state, the student's id, the exercise asked of its model. What cannot be done is
the record's ``refused`` text, which the handler says on the page (these handlers answer
with words where the question or the result stands, never an error pop-up). The store still
checks what only it knows (an open room, the lecturer's secret, an answer among the choices).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from transformer.lab.exercises import (
    BY_ID,
    Asked,
    Exercise,
    ExerciseError,
    ask,
    exercise,
    view_exercise,
)
from transformer.text.real_tokenizers import REAL_TOKENIZERS, load_real_tokenizer

from ..links.rooms import RoomError, normal_code, view_params
from ..links.share import decode_view

ASKED_CACHE = 64  # bank exercises asked of the bundled models, kept per process

NO_HOSTING = "host a room first (Follow a lecturer → Host a room)"
NO_ROOM = "there is no open room (empty): check the code"  # the rooms' own words for ""

# What a student's page says instead of taking the answer.
NOTHING_ASKED = "Pick an exercise first."
NO_CHOICE = "Choose an answer first."
LECTURERS_OWN = "The lecturer's page does not answer its own question."


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


@dataclass(frozen=True)
class Hosting:
    """The lecturer's room as the follow-me controls keep it in the browser (``[code,
    secret]``), read once: the code as the rooms keep it and the secret, or, when the page
    hosts no room (or the browser kept something else), ``refused``."""

    code: str = ""
    secret: str = ""
    refused: str = ""

    @classmethod
    def of(cls, hosting: Any) -> Hosting:
        """The room of the follow-me controls' ``hosting``; never raises."""
        pair = list(hosting) if isinstance(hosting, (list, tuple)) else []
        code, secret = [*pair, "", ""][:2]
        if not code or not isinstance(code, str):
            return cls(refused=NO_HOSTING)
        # A code that reads as nothing is the rooms' to refuse, in their own words.
        return cls(normal_code(code), str(secret))


@dataclass(frozen=True)
class RoomAsk:
    """What a lecturer asks their room, read once: the room (:class:`Hosting`) and the
    exercise asked of its model (``asked``), or why it cannot be (``refused``)."""

    room: Hosting
    asked: Asked | None = None
    refused: str = ""

    @classmethod
    def bank(cls, models: Any, hosting: Any, exercise_id: Any, session: Any = None) -> RoomAsk:
        """The bank's exercise ``exercise_id``, asked of its model from ``models`` (a
        ``ModelRegistry``); never raises. The room is checked first: nothing is asked of a
        model for a page that hosts no room."""
        room = Hosting.of(hosting)
        if room.refused:
            return cls(room, refused=room.refused)
        request = AskRequest.of(models, exercise_id, session=session)
        return cls(room, request.asked, request.refused)

    @classmethod
    def view(
        cls,
        rooms: Any,
        models: Any,
        hosting: Any,
        session: Any = None,
        tabs: Mapping[str, Any] | None = None,
    ) -> RoomAsk:
        """The question about the view the room shows now (its latest link in ``rooms``,
        a ``RoomStore``; ``tabs``: the app's ``Views.tabs``, whose defaults fill what the
        link leaves out), asked of its model from ``models``; never raises."""
        room = Hosting.of(hosting)
        if room.refused:
            return cls(room, refused=room.refused)
        try:
            _, query = rooms.latest(room.code)
            params = room_view(query, tabs, models)
            item = view_exercise(params.get("tab", ""), params)
            asked = ask_exercise(models, item, session)
        except (ExerciseError, RoomError) as error:
            return cls(room, refused=str(error))
        return cls(room, asked)


@dataclass(frozen=True)
class LecturerPage:
    """The page's state at a tick of the lecturer's timer, read once: the room and round
    that page asked, or ``code`` ``""`` when it asked none (a student's page, or alone)."""

    code: str = ""
    round: int = 0

    @classmethod
    def of(cls, state: Any) -> LecturerPage:
        """The lecturer's question the page's ``state`` holds; never raises."""
        if not isinstance(state, dict) or state.get("mode") != "lecturer":
            return cls()
        number = state.get("round")
        return cls(normal_code(state.get("code")), number if isinstance(number, int) else 0)


@dataclass(frozen=True)
class StudentPage:
    """A student's page at a look at its room, read once: the room it follows (the code as
    the rooms keep it, ``""`` when it follows none), its state (``{}`` before a question)
    and the student's id (``""`` when the browser kept none)."""

    code: str
    state: dict[str, Any]
    student: str

    @classmethod
    def of(cls, room: Any, state: Any, student: Any) -> StudentPage:
        """The page's room, state and student; never raises."""
        return cls(
            normal_code(room),
            state if isinstance(state, dict) else {},
            student if isinstance(student, str) else "",
        )

    def shows(self, number: int) -> bool:
        """Whether the page shows round ``number`` of its room already."""
        return (
            self.state.get("mode") == "room"
            and self.state.get("code") == self.code
            and self.state.get("round") == number
        )


@dataclass(frozen=True)
class PageAnswer:
    """A student's answer on the page, read once: the choice, the page's state (what it
    asked, ``mode`` ``"alone"`` or ``"room"``), the score kept so far and the student's id;
    or what the page says instead (``refused``: nothing asked, no choice, the lecturer's
    own page)."""

    choice: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    score: dict[str, Any] = field(default_factory=dict)
    student: str = ""
    refused: str = ""

    @classmethod
    def of(cls, choice: Any, state: Any, score: Any, student: Any) -> PageAnswer:
        """The answer the page sends; never raises."""
        if not state or not isinstance(state, dict):
            return cls(refused=NOTHING_ASKED)
        if not choice or not isinstance(choice, str):
            return cls(refused=NO_CHOICE)
        if state.get("mode") not in ("alone", "room"):
            return cls(refused=LECTURERS_OWN)
        kept = dict(score) if isinstance(score, dict) and score else {}
        return cls(choice, state, kept, student if isinstance(student, str) else "")


@dataclass(frozen=True)
class RoomCode:
    """A room code a client sends, read once: as the rooms keep it (any case, spaces and
    dashes left out), or ``refused`` when it reads as nothing."""

    code: str = ""
    refused: str = ""

    @classmethod
    def of(cls, room: Any) -> RoomCode:
        """The code ``room``; never raises."""
        code = normal_code(room)
        return cls(code) if code else cls(refused=NO_ROOM)


@dataclass(frozen=True)
class ApiAnswer:
    """An answer a client that is not a page sends, read once: the room (:class:`RoomCode`),
    the student's id and the answer as sent (the store checks those against the question
    asked now)."""

    room: RoomCode
    student: Any
    answer: Any

    @classmethod
    def of(cls, room: Any, student: Any, answer: Any) -> ApiAnswer:
        """The answer to room ``room``'s question; never raises."""
        return cls(RoomCode.of(room), student, answer)
