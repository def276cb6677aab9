"""Follow me: a lecturer's page shows a short room code; a student who joins with it sees the
lecturer's view (tab, tour stop, preset, controls, Generate's step) as it changes.

The server keeps a registry of rooms (bounded, expiring): per room only the lecturer's latest
view, as the query of the app's own shareable link (``ui/links/share.py``), and a version number.
The lecturer's page publishes its view four times a second while it hosts (nothing is kept when
it did not change); each follower's page asks for the room's version (a tiny event, answered
once the room moves), and when it moved one event draws the view's tab (its controls and
figures, read from the views every session shares; Generate's step drawn once for every
follower, ``ui/links/following.py``), then settles it as a shared link's view is settled
(``ui/links/views.py``). While it follows, the rest of a follower's page is read-only (made
``inert`` in the browser: no click, key or focus reaches it), and a button pinned to the
screen says "Following <code> — Take over": taking over stops following and gives back the
page, interactive, at the view it shows. The lecturer's code and secret are kept in the browser
(``gr.BrowserState``), so a reload resumes the same room and brings back its view; a
follower's page is not touched by it.

A client address holds at most ``MAX_ROOMS_PER_CLIENT`` rooms, and a lecture's room (published
to or read within ``ACTIVE_S``) is never closed to make way for another client's new one.

One process keeps its rooms in memory (:class:`Rooms`). Several processes serving one class
(``app.py --workers N``) keep them in Redis (:class:`RedisRooms`, same interface and rules), so
that a student's process answers with the lecturer's view whichever process the lecturer's
page publishes to.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

import gradio as gr

from ..serving import clients
from ..serving.store import Breaker
from .following import SharedSteps
from .share import MAX_QUERY, decode_view
from .views import SCROLL_JS, WAIT_UNTIL_IDLE_JS, merge_outputs, same_value, union

if TYPE_CHECKING:
    import redis

# views.KEEP_USER_CHANGES_JS for inputs that end with (view, touched): whether the user clicked
# or typed while the view settled, which the settle keeps.
KEEP_USER_CHANGES_LAST_JS = """
(...values) => [...values.slice(0, -1), window.__viewTouched === true]
"""

# Letters and digits that cannot be misread on a projector (no 0/O, 1/I/L, 5/S, 2/Z, 8/B).
CODE_ALPHABET = "ACDEFGHJKMNPQRTUVWXY34679"
CODE_LENGTH = 5
MAX_ROOMS = 200
# Rooms one client address may hold open at once: a lecturer hosts one per page, while a client
# that opened hundreds made an active lecture's room close (the least recently used went first)
# and its lecturer silently got a new code.
MAX_ROOMS_PER_CLIENT = 10
ROOM_IDLE_S = 4 * 3600.0  # a room nobody published to or read from for this long is closed
# A room a lecturer's page published to, or a follower read, within this long is a lecture's:
# another client's new room never closes it (that new room is refused instead).
ACTIVE_S = 15 * 60.0
# How often a lecturer's page sends its view (nothing is kept when it is unchanged): a second
# was half a second of every change's way to the followers, on average.
PUBLISH_S = 0.25
# A follower's page asks again this long after its last question was answered. A question is
# answered when the room moves, or after WAIT_S: the server waits for the change (looking every
# LOOK_S, at no cost but a lookup), so that a change reaches the followers at once, where a
# question every two seconds made it wait a second on average and cost a request each time.
POLL_S = 0.25
WAIT_S = 10.0
LOOK_S = 0.05


def without_shown(out: Any, shown: Any) -> Any:
    """A view's output to a control, without the value the page shows already (``shown``): a
    value alone becomes a skip, an update keeps its other properties. Every output sent costs
    the server for each follower at each change; a tab's controls mostly stay as they were."""
    update = isinstance(out, dict) and out.get("__type__") == "update"
    if isinstance(out, gr.blocks.Block) or (update and "value" not in out):
        return out
    try:
        if not same_value(shown, out["value"] if update else out):
            return out
    except (TypeError, ValueError):  # a value with no plain equality (an array): sent
        return out
    if not update:
        return gr.skip()
    kept = {k: v for k, v in out.items() if k != "value"}
    return kept if len(kept) > 1 else gr.skip()


class RoomError(ValueError):
    """A room code that names no open room, or a secret that is not the room's."""


class RoomsUnavailable(RoomError):
    """The rooms' store (Redis) did not answer: the room may well be open still."""


class RoomRefused(RoomError):
    """No new room: the client holds as many as one may, or every room is a lecture's."""


def too_many_for_client(limit: int) -> RoomRefused:
    """The refusal of a client that holds ``limit`` rooms already."""
    return RoomRefused(
        f"this address has {limit} rooms open already, the most one may host: host from a page "
        f"that hosts one (it keeps its code), or wait until one closes "
        f"({ROOM_IDLE_S / 3600:g} hours after its last use)"
    )


def all_rooms_in_use(limit: int) -> RoomRefused:
    """The refusal when every one of the ``limit`` rooms is a lecture in progress."""
    return RoomRefused(f"all {limit} rooms are lectures in progress: try again in a few minutes")


@dataclass
class Room:
    """One lecture: its code, the lecturer's secret, the latest view and its version."""

    code: str
    secret: str
    view: str = ""  # the query of the lecturer's view link ("tab=generate&source=...")
    version: int = 0
    used: float = 0.0  # when it was last published to or read (the registry's clock)
    client: str = ""  # the address that opened it ("" when not known)
    # When a lecturer's page last published to it or a follower read it (never: -inf).
    active: float = float("-inf")


class RoomBounds:
    """The bounds a registry of rooms keeps: at most ``max_rooms`` rooms, each closed
    ``idle_s`` seconds after its last use, at most ``per_client`` of them opened by one client
    address; a room published to or read within ``active_s`` is a lecture's."""

    def __init__(self, max_rooms: int, idle_s: float, per_client: int, active_s: float) -> None:
        self.max_rooms = max_rooms
        self.idle_s = idle_s
        self.per_client = per_client
        self.active_s = active_s


def ask_redis(breaker: Breaker, unavailable: str, work: Callable[[], Any]) -> Any:
    """What ``work()`` gets from Redis, asked through ``breaker``: a :class:`RoomsUnavailable`
    saying ``unavailable`` while the breaker leaves Redis alone, or when Redis fails."""
    import redis

    if not breaker.closed():
        raise RoomsUnavailable(unavailable)
    try:
        found = work()
    except redis.RedisError as error:
        breaker.failed(error)
        raise RoomsUnavailable(unavailable) from error
    breaker.worked()
    return found


class Rooms(RoomBounds):
    """The open rooms, at most ``max_rooms``, each closed after ``idle_s`` seconds unused. Past
    the bound the least recently used room that is not a lecture's (published to or read within
    ``active_s``) is closed; when every room is a lecture's, the new one is refused. A client
    address holds at most ``per_client`` rooms. Safe to use from many threads."""

    def __init__(
        self,
        max_rooms: int = MAX_ROOMS,
        idle_s: float = ROOM_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
        per_client: int = MAX_ROOMS_PER_CLIENT,
        active_s: float = ACTIVE_S,
    ) -> None:
        super().__init__(max_rooms, idle_s, per_client, active_s)
        self.clock = clock
        self._rooms: OrderedDict[str, Room] = OrderedDict()
        self._lock = threading.Lock()
        self._expired_at = float("-inf")

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._rooms)

    def open(self, client: str = "") -> Room:
        """A new room with a fresh code and secret, opened by the address ``client`` (""
        when not known: no bound per address); :class:`RoomRefused` when that address holds
        ``per_client`` rooms already, or every room is a lecture's."""
        with self._lock:
            self._expire(force=True)
            if client and sum(r.client == client for r in self._rooms.values()) >= self.per_client:
                raise too_many_for_client(self.per_client)
            now = self.clock()
            if len(self._rooms) >= self.max_rooms:
                # The least recently used room that is no lecture's makes way.
                idle = next(
                    (c for c, r in self._rooms.items() if now - r.active > self.active_s), None
                )
                if idle is None:
                    raise all_rooms_in_use(self.max_rooms)
                del self._rooms[idle]
            while True:
                code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
                if code not in self._rooms:
                    break
            room = Room(code, secrets.token_urlsafe(16), used=now, client=client)
            self._rooms[code] = room
            return room

    def _room(self, code: str, active: bool = True) -> Room:
        """The open room called ``code`` (any case, spaces ignored), now the most recently
        used (and, when ``active``, a lecture's); the lock is held."""
        self._expire()
        key = normal_code(code)
        room = self._rooms.get(key)
        if room is None or self.clock() - room.used > self.idle_s:
            raise RoomError(f"there is no open room {key or '(empty)'}: check the code")
        room.used = self.clock()
        if active:
            room.active = room.used
        self._rooms.move_to_end(key)
        return room

    def resume(self, code: str, secret: str) -> Room:
        """The lecturer's room again (after a reload of their page)."""
        with self._lock:
            room = self._room(code, active=False)
            if not same_secret(room.secret, secret):
                raise RoomError(f"room {room.code} belongs to another page")
            room.active = room.used
            return room

    def publish(self, code: str, secret: str, view: str) -> int:
        """Set the room's view (a link's query) and return its version, raised by one only
        when the view changed."""
        if len(view) > MAX_QUERY:
            raise RoomError(f"a view of {len(view):,} characters is longer than a link may be")
        with self._lock:
            room = self._room(code, active=False)
            if not same_secret(room.secret, secret):
                raise RoomError(f"room {room.code} belongs to another page")
            room.active = room.used
            if view != room.view:
                room.view = view
                room.version += 1
            return room.version

    def latest(self, code: str) -> tuple[int, str]:
        """The room's ``(version, view)``."""
        with self._lock:
            room = self._room(code)
            return room.version, room.view

    def _expire(self, force: bool = False) -> None:
        """Close the rooms unused for ``idle_s``: at most once a second (a follower's wait
        looks at its room many times a second), or now when ``force``. The lock is held."""
        now = self.clock()
        if not force and now - self._expired_at < 1.0:
            return
        self._expired_at = now
        for code in [c for c, r in self._rooms.items() if now - r.used > self.idle_s]:
            del self._rooms[code]


class RoomStore(Protocol):
    """What follow me asks of a registry of rooms: :class:`Rooms` or :class:`RedisRooms`."""

    def __len__(self) -> int: ...

    def open(self, client: str = "") -> Room: ...

    def resume(self, code: str, secret: str) -> Room: ...

    def publish(self, code: str, secret: str, view: str) -> int: ...

    def latest(self, code: str) -> tuple[int, str]: ...


# The Redis rooms' scripts. Each runs atomically in Redis, so that two processes publishing to
# one room (a lecturer's two tabs) raise its version once per change, and a code is never
# given twice. A room is a hash <prefix>room:<CODE> (secret, view, version) that expires
# idle_s after its last use; the sorted set <prefix>rooms orders the codes by last use (by a
# counter, <prefix>rooms:used, not a clock: the processes' clocks need not agree), for the
# bound on their number. KEYS: the room, the set, the counter; ARGV[1]: idle_s in ms, ARGV[2]:
# the code.
_TOUCH = """
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
"""
# Codes of rooms that expired leave the set; ARGV[4]: the rooms' key prefix.
_PRUNE = """
for _, code in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('EXISTS', ARGV[4] .. code) == 0 then redis.call('ZREM', KEYS[2], code) end
end
"""
# Now in milliseconds, by Redis's clock (the processes' clocks need not agree).
_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""


def _touching(body: str, end: str) -> str:
    """A script that knows the time (``now``), runs ``body``, then marks the room used (its
    expiry and its place in the set: ``body`` returns early where the room is not to be
    touched) and runs ``end``."""
    return _NOW + body + _TOUCH + end


# A new room (0 when the code is taken), opened by the client whose set of codes is KEYS[4]
# (none when ARGV[6] is ""), which may hold ARGV[7] rooms (-3 past that). Past ARGV[5] rooms,
# the least recently used one that no lecturer published to and no follower read within
# ARGV[8] ms closes; when every room is a lecture's, no room is opened (-4).
_OPEN = _touching(
    _PRUNE
    + """
if ARGV[6] ~= '' then
  for _, code in ipairs(redis.call('SMEMBERS', KEYS[4])) do
    if redis.call('EXISTS', ARGV[4] .. code) == 0 then redis.call('SREM', KEYS[4], code) end
  end
  if redis.call('SCARD', KEYS[4]) >= tonumber(ARGV[7]) then return -3 end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  local closed = false
  for _, code in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    local active = tonumber(redis.call('HGET', ARGV[4] .. code, 'active') or '-1')
    if active < 0 or now - active > tonumber(ARGV[8]) then
      redis.call('DEL', ARGV[4] .. code)
      redis.call('ZREM', KEYS[2], code)
      closed = true
      break
    end
  end
  if not closed then return -4 end
end
redis.call('HSET', KEYS[1], 'secret', ARGV[3], 'view', '', 'version', 0, 'active', -1,
  'client', ARGV[6])
if ARGV[6] ~= '' then
  redis.call('SADD', KEYS[4], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[1])
end
""",
    "return 1",
)
# The room's (secret, version, view), now the most recently used; false when it is closed.
# ARGV[3]: the secret that asks (a lecturer's page resuming it): when it is the room's, the
# room is a lecture's now.
_READ = _touching(
    """
local room = redis.call('HMGET', KEYS[1], 'secret', 'version', 'view')
if not room[1] then return false end
if room[1] == ARGV[3] then redis.call('HSET', KEYS[1], 'active', now) end
""",
    "return room",
)
# The room's (version, view) alone: a follower's poll, one round trip; it is a lecture's now.
_LATEST = _touching(
    """
local room = redis.call('HMGET', KEYS[1], 'version', 'view')
if not room[1] then return false end
redis.call('HSET', KEYS[1], 'active', now)
""",
    "return room",
)
# Set the view ARGV[4] and return the version, raised only when the view changed; the secret
# ARGV[3] was checked by the caller, and is checked again in case the code was closed and given
# to another page meanwhile. -1: closed; -2: another page's room.
_PUBLISH = _touching(
    """
local room = redis.call('HMGET', KEYS[1], 'secret', 'view')
if not room[1] then return -1 end
if room[1] ~= ARGV[3] then return -2 end
redis.call('HSET', KEYS[1], 'active', now)
""",
    """
if room[2] == ARGV[4] then return tonumber(redis.call('HGET', KEYS[1], 'version')) end
redis.call('HSET', KEYS[1], 'view', ARGV[4])
return redis.call('HINCRBY', KEYS[1], 'version', 1)
""",
)
_COUNT = _PRUNE + "return redis.call('ZCARD', KEYS[2])"


class RedisRooms(RoomBounds):
    """:class:`Rooms` kept in Redis, shared by the app processes that serve one class: the same
    codes, secrets, versions, bound and expiry (by Redis, ``idle_s`` after a room's last use),
    each operation atomic in Redis. A follower's :meth:`latest` is one round trip. An error of
    Redis is a :class:`RoomsUnavailable` (follow me pauses; the pages stay as they are)."""

    def __init__(
        self,
        client: redis.Redis,
        max_rooms: int = MAX_ROOMS,
        idle_s: float = ROOM_IDLE_S,
        prefix: str = "visualiser:",
        per_client: int = MAX_ROOMS_PER_CLIENT,
        active_s: float = ACTIVE_S,
    ) -> None:
        super().__init__(max_rooms, idle_s, per_client, active_s)
        self.client = client
        # A Redis that failed is not asked again for a poll's period: with a server that does
        # not answer, each call would hold a thread for its timeout (fifty polls a second).
        self.breaker = Breaker("follow-me rooms", retry_after_s=2.0)
        self._room_prefix = f"{prefix}room:"
        self._set = f"{prefix}rooms"
        self._counter = f"{prefix}rooms:used"
        self._clients = f"{prefix}client:"
        self._scripts = {
            name: client.register_script(lua)
            for name, lua in [
                ("open", _OPEN),
                ("read", _READ),
                ("latest", _LATEST),
                ("publish", _PUBLISH),
                ("count", _COUNT),
            ]
        }

    def _run(self, name: str, code: str, *args: Any, keys: tuple[str, ...] = ()) -> Any:
        """Run script ``name`` for room ``code`` (a normal code) with ``args`` after the
        common ones, and ``keys`` after the common keys."""
        unavailable = "follow me is unavailable for a moment (the rooms' store does not answer)"
        every = [self._room_prefix + code, self._set, self._counter, *keys]
        ttl_ms = max(1, round(self.idle_s * 1000))
        script = self._scripts[name]
        return ask_redis(
            self.breaker, unavailable, lambda: script(keys=every, args=[ttl_ms, code, *args])
        )

    def __len__(self) -> int:
        return int(self._run("count", "", "", self._room_prefix))

    def open(self, client: str = "") -> Room:
        """A new room with a fresh code (unique across the processes) and secret, opened by
        the address ``client`` (see :meth:`Rooms.open`)."""
        secret = secrets.token_urlsafe(16)
        client = client[:100]
        while True:
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            active_ms = max(1, round(self.active_s * 1000))
            args = (secret, self._room_prefix, self.max_rooms, client, self.per_client, active_ms)
            opened = int(self._run("open", code, *args, keys=(self._clients + client,)))
            if opened == -3:
                raise too_many_for_client(self.per_client)
            if opened == -4:
                raise all_rooms_in_use(self.max_rooms)
            if opened == 1:
                return Room(code, secret, used=time.monotonic(), client=client)

    def _read(self, code: str, secret: str = "") -> Room:
        key = normal_code(code)
        found = self._run("read", key, secret) if key else None
        if not found:
            raise RoomError(f"there is no open room {key or '(empty)'}: check the code")
        secret, version, view = (part.decode() for part in found)
        return Room(key, secret, view, int(version), used=time.monotonic())

    def resume(self, code: str, secret: str) -> Room:
        """The lecturer's room again (after a reload of their page)."""
        room = self._read(code, secret if isinstance(secret, str) else "")
        if not same_secret(room.secret, secret):
            raise RoomError(f"room {room.code} belongs to another page")
        return room

    def publish(self, code: str, secret: str, view: str) -> int:
        """Set the room's view (a link's query) and return its version, raised by one only
        when the view changed (atomically, whichever process publishes)."""
        if len(view) > MAX_QUERY:
            raise RoomError(f"a view of {len(view):,} characters is longer than a link may be")
        room = self.resume(code, secret)
        version = int(self._run("publish", room.code, room.secret, view))
        if version == -1:
            raise RoomError(f"there is no open room {room.code}: check the code")
        if version == -2:
            raise RoomError(f"room {room.code} belongs to another page")
        return version

    def latest(self, code: str) -> tuple[int, str]:
        """The room's ``(version, view)``."""
        key = normal_code(code)
        found = self._run("latest", key) if key else None
        if not found:
            raise RoomError(f"there is no open room {key or '(empty)'}: check the code")
        version, view = found
        return int(version), view.decode()


def client_address(request: gr.Request | None) -> str:
    """The address a request came from, as the server sees it everywhere (a forwarded address
    only from a proxy the operator names: :func:`ui.serving.clients.client_address`); "" when
    not known (a test's call, a Unix socket), which no room limit counts."""
    if request is None:
        return ""
    address = clients.client_address(request)
    return "" if address == "unknown" else address


def same_secret(kept: str, given: Any) -> bool:
    """Whether ``given`` (from a page: anything) is the room's secret, compared in constant
    time."""
    if not isinstance(given, str):
        return False
    return secrets.compare_digest(kept.encode(), given.encode())


def normal_code(code: Any) -> str:
    """A typed room code as the registry keeps it: upper case, spaces and dashes left out."""
    if not isinstance(code, str):
        return ""
    return "".join(ch for ch in code.upper() if ch.isalnum())[: 2 * CODE_LENGTH]


def view_params(query: str) -> dict[str, list[str]]:
    """A link's query as ``decode_view`` reads it (key → values)."""
    return parse_qs(query, keep_blank_values=True)


# The follower's page, read-only while it follows: every part of the page but the follow-me
# accordion (and the toasts) is made inert, marked so that taking over undoes exactly that. The
# Take over button is pinned to the bottom of the screen by a style sheet keyed on the page's
# class (the button's element is made anew when it is shown, so a style set on the element
# that was there was lost, and the button sat at the page's end, thousands of pixels down),
# narrower than the screen, with room left below the page's end so that it hides nothing
# there. Run whenever the code followed changes (set by following, taking over, a closed
# room), with that code ("" when the page is its own).
READ_ONLY_JS = """
(code) => {
  if (!document.getElementById("follow-me-style")) {
    const style = document.createElement("style");
    style.id = "follow-me-style";
    style.textContent = `
      body.following-room #take-over {
        position: fixed !important; left: 50% !important; right: auto !important;
        top: auto !important; bottom: calc(12px + env(safe-area-inset-bottom, 0px)) !important;
        transform: translateX(-50%); z-index: 1000; width: auto !important;
        min-width: 0 !important; max-width: calc(100vw - 24px); flex: none !important;
        white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
        box-shadow: 0 2px 12px rgba(0, 0, 0, 0.35);
      }
      body.following-room { padding-bottom: 72px; }
    `;
    document.head.appendChild(style);
  }
  for (const node of document.querySelectorAll("[data-follow-inert]")) {
    node.inert = false;
    node.removeAttribute("data-follow-inert");
  }
  document.body.classList.toggle("following-room", Boolean(code));
  if (!code) return [];
  let keep = document.getElementById("follow-me");
  while (keep && keep.parentElement && keep !== document.body) {
    for (const sibling of keep.parentElement.children) {
      const toasts = sibling.matches(".toast-wrap, [data-testid='toast-body']")
        || sibling.querySelector(".toast-wrap, [data-testid='toast-body']");
      if (sibling === keep || toasts || ["SCRIPT", "STYLE"].includes(sibling.tagName)) continue;
      sibling.inert = true;
      sibling.setAttribute("data-follow-inert", "");
    }
    if (keep.classList.contains("gradio-container")) break;
    keep = keep.parentElement;
  }
  return [];
}
"""


def take_over_button(code: str) -> Any:
    """The Take over button as it shows while following ``code`` (hidden when ``code`` is
    empty)."""
    if not code:
        return gr.Button("Take over", visible=False)
    return gr.Button(f"Following {code} — Take over", visible=True)


# A lecturer's click on a tab reaches the room at once, not at the publish tick (a quarter of
# a second of every tab change's way to the followers, 0.125 s on average): once the click has
# set the tab on screen, the page clicks the hidden Publish button, only where it hosts a room
# (its room line says so), so that a student's tab click costs the server nothing more (a
# publish reads the page's hundred controls: 15 ms of the server's time).
HOSTING_MARK = "Room code:"
PUBLISH_NOW_JS = """
() => {
  const line = document.getElementById('room-line');
  if (!line || !line.textContent.includes(MARK)) return [];
  const button = document.getElementById('publish-now');
  const target = button && (button.tagName === 'BUTTON' ? button : button.querySelector('button'));
  if (target) target.click();
  return [];
}
""".replace("MARK", repr(HOSTING_MARK))
FOLLOW_CSS = "#publish-now { display: none !important; }"


def room_line(code: str) -> str:
    """The lecturer's line: the room code, large."""
    return (
        f"### {HOSTING_MARK} `{code}`\nStudents: open this app, *Follow a lecturer*, type the code. "
        "They see your tab, tour stop and controls as you change them."
    )


class FollowMe:
    """The follow-me controls of the page and their events (see the module's docstring)."""

    def __init__(self, rooms: RoomStore) -> None:
        self.rooms = rooms
        with gr.Accordion(
            "Follow a lecturer (room code)", open=False, elem_id="follow-me"
        ) as self.accordion:
            with gr.Row():
                self.host = gr.Button("Host a room (lecturer)", size="sm", scale=0, min_width=200)
                # Clicked by the page's script only (PUBLISH_NOW_JS); hidden by FOLLOW_CSS.
                self.publish_now = gr.Button("Publish", elem_id="publish-now", scale=0)
                self.code = gr.Textbox(
                    label="Room code",
                    placeholder="e.g. K7MQA",
                    max_length=20,
                    scale=1,
                    min_width=140,
                    elem_id="room-code",
                )
                self.follow = gr.Button("Follow", size="sm", scale=0, min_width=100)
                self.take_over = gr.Button(
                    "Take over",
                    size="sm",
                    scale=0,
                    min_width=120,
                    variant="primary",
                    visible=False,
                    elem_id="take-over",
                )
            self.line = gr.Markdown(elem_id="room-line")
            # The code this page follows ("" when none), for the page's read-only script.
            self.followed = gr.Textbox("", visible=False)
        # The lecturer's (code, secret), kept in the browser across reloads.
        self.hosting = gr.BrowserState(["", ""], storage_key="visualiser-room")
        self.following = gr.State(["", -1])  # (code, version applied)
        self.incoming = gr.State(None)  # a view to apply (a lecturer's page reloaded)
        # The room this page hosted when it opened (a reload), read as it opens.
        self.hosted_before = gr.State(["", ""])
        # Per tab, the room's view on it, set by a poll that found the room moved to it.
        self.polled: dict[str, gr.Textbox] = {}
        self.shared: SharedSteps | None = None  # Generate's steps as followers see them
        self.publish_timer = gr.Timer(PUBLISH_S, active=False)
        self.follow_timer = gr.Timer(POLL_S, active=False)

    def wire(self, demo: gr.Blocks, views: Any, registry: Any, opened: Any) -> None:
        """The events: host, resume after a reload, publish, follow, poll, apply, take over.
        ``views`` is the app's ``Views``, ``registry`` its ``ModelRegistry``, ``opened`` the
        last step of what a page does when it opens (a resumed room's view comes after it, so
        that the tabs' first views do not draw over it)."""
        private: dict[str, Any] = {"api_visibility": "private", "queue": False}
        self.host.click(
            self.open_room,
            [self.hosting],
            [self.hosting, self.line, self.publish_timer],
            **private,
        )
        link_inputs = views.link_inputs()

        def publish(hosting: list[str], *values: Any) -> Any:
            code, secret = (hosting or ["", ""])[:2]
            if not code:
                return gr.Timer(active=False)
            query = views.link("", *values).lstrip("?")
            if len(query) > MAX_QUERY:  # a view too long for a link (a long text): not sent,
                return gr.skip()  # and the next one that fits is
            try:
                self.rooms.publish(code, secret, query)
            except RoomsUnavailable:  # sent again at the next tick
                return gr.skip()
            except RoomError:
                return gr.Timer(active=False)
            return gr.skip()

        self.publish_timer.tick(
            publish, [self.hosting, *link_inputs], [self.publish_timer], **private
        )
        self.publish_now.click(
            publish, [self.hosting, *link_inputs], [self.publish_timer], **private
        )
        for selected in views.tab_selected:  # once the click has set the tab on screen
            selected.then(None, None, None, js=PUBLISH_NOW_JS, **private)
        followed = [self.following, self.line, self.follow_timer, self.take_over, self.followed]
        following = [*followed, self.accordion]
        self.follow.click(self.start_following, [self.code], following, **private)
        self.code.submit(self.start_following, [self.code], following, **private)
        # Per tab, a hidden box the poll writes a moved room's view into (see below).
        self.polled = {
            slug: gr.Textbox("", visible=False, elem_id=f"room-view-{slug}") for slug in views.tabs
        }
        boxes = list(self.polled.values())

        def take_over(following: list | None) -> tuple:
            # Emptied in place: a question the page asked before (waiting for the room to
            # move) sees it and brings nothing.
            if isinstance(following, list):
                following[:] = ["", -1]
            # The boxes emptied, so that following again draws the room's view even where it
            # did not move meanwhile.
            return (*self.stop_following(), *[""] * len(boxes))

        self.take_over.click(take_over, [self.following], [*followed, *boxes], **private)
        # The page is read-only exactly while it follows a room.
        self.followed.change(None, [self.followed], None, js=READ_ONLY_JS, **private)
        self.shared = SharedSteps(views, registry) if "generate" in views.tabs else None
        if self.shared is not None and self.shared.step is not None:
            self.shared.quiet_while_following()
            shared = self.shared

            # Once the page is its own again, its generation goes on from the step it shows.
            def catch_up(code: str, *values: Any) -> Any:
                return gr.skip() if code else shared.catch_up(*values)

            self.followed.change(
                catch_up,
                [self.followed, *shared.catch_up_inputs()],
                [shared.state],
                api_visibility="private",
                show_progress="hidden",
            )

        # The poll: one tiny event every POLL_S (the code followed in, the version seen out),
        # not queued: a plain request, answered at once, that never waits for a costly or a
        # cheap view. Gradio's cost of an event grows with its outputs (each update of a
        # component is a component built anew for the session: 0.5 ms each), so the poll
        # carries no figure: a poll that drew the whole page (129 outputs) cost 75 ms even
        # when nothing had changed, and a hundred followers' polls alone outran a 2-core CPU.
        # When the room moved, the poll writes the view into a hidden box of the view's tab
        # (a box, not a state: a state set by an unqueued event does not fire its .change),
        # whose change draws that tab alone: one request per follower per change, with that
        # tab's controls and figures only, read from the views every session shares (the
        # lecturer's own page computed them).
        self.follow_timer.tick(
            self.poll_tabs,
            [self.following],
            [self.following, *self.polled.values(), *followed[1:]],
            **private,
        )
        for slug, polled in self.polled.items():
            self._wire_tab(views, registry, slug, polled)
        # The room comes back after the tabs' first views, which take a minute on a busy
        # machine: by then a fresh page may host a room of its own, and must not be sent back
        # to that room's last view (its newer tab was not published yet). Only a room the page
        # held as it opened comes back, read at once.
        demo.load(lambda hosting: hosting, [self.hosting], [self.hosted_before], **private)
        # Queued, as the poll is: the view it may set must fire .change.
        opened.then(
            self.resume_room,
            [self.hosted_before, self.hosting],
            [self.hosting, self.line, self.publish_timer, self.incoming],
            api_visibility="private",
            show_progress="hidden",
        )

        def decode(incoming: dict | None) -> dict | None:
            if not incoming or not incoming.get("query"):
                return None
            return decode_view(view_params(incoming["query"]), views.tabs, registry).view

        # A lecturer's reload brought the room's view back: applied as a link is.
        arrived = self.incoming.change(
            decode,
            [self.incoming],
            [views.view],
            api_visibility="private",
            show_progress="hidden",
        )
        # A lecturer's page publishes again only once the room's view is back on it (its first
        # tick would otherwise send the page as it opened, over the room's view): as soon as
        # the view is settled, so that the lecturer's next change reaches the room within a
        # tick, or, for a Generate step still to be replayed, once it is.
        settled = (self.publish_settled, [self.hosting, views.view], [self.publish_timer])
        views.follow(arrived, settled=settled).then(
            self.publish_again, [self.hosting], [self.publish_timer], **private
        )

    # -- handlers (module-level logic, callable from tests) --------------------------------

    def open_room(self, hosting: list[str] | None, request: gr.Request | None = None) -> tuple:
        """Host a room (the one this page hosts already, if it is still open); the client's
        address (``request``'s) bounds the rooms it holds."""
        code, secret = (hosting or ["", ""])[:2]
        if code:
            try:
                room = self.rooms.resume(code, secret)
                return [room.code, room.secret], room_line(room.code), gr.Timer(active=True)
            except RoomsUnavailable as error:
                return gr.skip(), f"⚠️ {error}: try again.", gr.skip()
            except RoomError:
                pass
        try:
            room = self.rooms.open(client_address(request))
        except RoomsUnavailable as error:
            return gr.skip(), f"⚠️ {error}: try again.", gr.skip()
        except RoomRefused as error:
            return gr.skip(), f"⚠️ No room: {error}.", gr.skip()
        return [room.code, room.secret], room_line(room.code), gr.Timer(active=True)

    def resume_room(self, before: list[str] | None, hosting: list[str] | None) -> tuple:
        """On page load: a lecturer's page that hosted a room as it opened (``before``), and
        still does (``hosting``), hosts it again and shows its latest view; any other page is
        left as it is (one that hosted a room while it opened shows its own view)."""
        code, secret = (before or ["", ""])[:2]
        if not code or (hosting or ["", ""])[0] != code:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        try:
            room = self.rooms.resume(code, secret)
        except RoomsUnavailable:  # still hosted: Host a room takes it up again
            line = f"Room {code}: follow me is unavailable for a moment; press Host a room again."
            return gr.skip(), line, gr.skip(), gr.skip()
        except RoomError:
            return ["", ""], "The room this page hosted has closed.", gr.skip(), gr.skip()
        # With a view to bring back, publishing starts once it is applied (publish_again).
        return (
            gr.skip(),
            room_line(room.code),
            gr.Timer(active=not room.view),
            self.view_of(room.view, room.version),
        )

    def publish_again(self, hosting: list[str] | None) -> Any:
        """After a view was applied: a page that hosts a room publishes again."""
        code = (hosting or ["", ""])[0]
        return gr.Timer(active=True) if code else gr.skip()

    def publish_settled(self, hosting: list[str] | None, view: dict | None) -> Any:
        """Once a view is settled on the page: :meth:`publish_again`, unless the view is a
        Generate step still to be replayed (until then the page shows the first step, which
        the followers must not be sent back to)."""
        if view and view.get("tab") == "generate" and int(view.get("step") or 1) > 1:
            return gr.skip()
        return self.publish_again(hosting)

    def start_following(self, code: str) -> tuple:
        """Follow the room ``code``: its view is applied at the next poll."""
        try:
            self.rooms.latest(code)
        except RoomError as error:
            return (
                ["", -1],
                f"⚠️ {error}.",
                gr.Timer(active=False),
                take_over_button(""),
                "",
                gr.skip(),
            )
        shown = normal_code(code)
        line = (
            f"Following room **{shown}**: this page shows the lecturer's view as it changes, "
            "read-only. **Take over** to explore alone from where it is."
        )
        return (
            [shown, -1],
            line,
            gr.Timer(active=True),
            take_over_button(shown),
            shown,
            gr.Accordion(open=True),  # where the Take over button is
        )

    def stop_following(self) -> tuple:
        """Stop following: the page, at the view it shows, is the student's own again."""
        return (
            ["", -1],
            "You have taken over: this page is yours again.",
            gr.Timer(active=False),
            take_over_button(""),
            "",
        )

    def poll(self, following: list | None) -> tuple:
        """The room's view when its version moved since the last one applied, else nothing."""
        code, seen = (following or ["", -1])[:2]
        unchanged = (gr.skip(),) * 4  # the line, the timer, the button, the code followed
        if not code:
            return gr.skip(), gr.skip(), *unchanged
        try:
            version, view = self.rooms.latest(code)
        except RoomsUnavailable:  # asked again at the next poll
            return gr.skip(), gr.skip(), *unchanged
        except RoomError:  # the room closed: the page is the student's own again
            line = f"Room {code} has closed: this page is yours again."
            return ["", -1], gr.skip(), line, gr.Timer(active=False), take_over_button(""), ""
        if version == seen or not view:
            return gr.skip(), gr.skip(), *unchanged
        return [code, version], self.view_of(view, version), *unchanged

    async def poll_tabs(self, following: list | None) -> tuple:
        """:meth:`poll`, once the room moved (or closed), or after ``WAIT_S``, with the room's
        view given to the box of its tab: ``(following, *one per tab in self.polled, line,
        timer, button, followed)``. Waiting holds no thread: the rooms in memory are looked
        up in the event loop, Redis's from a worker thread, every ``LOOK_S`` (Redis's every
        ``5 * LOOK_S``)."""
        import asyncio

        import anyio

        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        here = isinstance(self.rooms, Rooms)
        while True:
            if here:
                polled = self.poll(following)
            else:
                polled = await anyio.to_thread.run_sync(self.poll, following)
            # A view to draw, or the room closed (the page's own again).
            moved = isinstance(polled[1], dict) and "query" in polled[1]
            moved = moved or isinstance(polled[0], list)
            # The page took over meanwhile (its state emptied in place): nothing to bring.
            gone = isinstance(following, list) and not following[0]
            if gone:
                return (gr.skip(),) * (len(self.polled) + 5)
            if moved or loop.time() > deadline:
                break
            await asyncio.sleep(LOOK_S if here else 5 * LOOK_S)
        following, incoming, *rest = polled
        slug, box = "", ""
        if isinstance(incoming, dict) and incoming.get("query"):
            slug = (view_params(incoming["query"]).get("tab") or [""])[0]
            box = f"{incoming['version']} {incoming['query']}"  # a new version: a new value
        tabs = [box if each == slug else gr.skip() for each in self.polled]
        return following, *tabs, *rest

    def _wire_tab(self, views: Any, registry: Any, slug: str, polled: gr.Textbox) -> None:
        """The events that draw a room's view of tab ``slug`` on a follower's page once a poll
        set ``polled``: that tab's controls and figures, then (as a link's view does) settle
        where a redraw reset a control, scroll, and replay Generate's steps."""
        redraws = views._redraws[slug]
        mine = {c._id for c in views.tabs[slug].controls.values()}
        mine |= {c._id for f in redraws for c in f.outputs}
        positions = {c._id: i for i, c in enumerate(views.outputs)}
        outputs = [views.tabs_block, views.current, views.focus]
        outputs += [c for c in [*views.controls, *views.drawn] if c._id in mine]
        picks = [positions[c._id] for c in outputs]
        inputs = union(c for f in redraws for c in f.inputs)
        where = [views.draw_inputs.index(c) for c in inputs]
        count = len(views.draw_inputs)

        def every(values: tuple) -> list[Any]:
            full: list[Any] = [None] * count
            for i, value in zip(where, values, strict=True):
                full[i] = value
            return full

        shared = self.shared if slug == "generate" else None

        # The tab's inputs first, the event's own last: a panel's redraws are found by the
        # state they read last (Generate's cache view reads whether its panel is open).
        def draw(*values_and_incoming: Any) -> tuple:
            *values, incoming = values_and_incoming
            query = (incoming or "").partition(" ")[2]  # "<version> <query>"
            view = None
            if query:
                view = decode_view(view_params(query), views.tabs, registry).view
            if shared is not None and view and view.get("tab") == slug:
                # Generate at the lecturer's step, in this one event (see ui/links/following.py).
                figures = shared.draw(view, query, tuple(values))
                # The tab and the controls that changed set (each output costs gradio time, for
                # every follower); the figures are the shared ones.
                drawn = (*views._set(view), *[gr.skip()] * len(views.drawn))
                page = {c._id: v for c, v in zip(inputs, values, strict=True)}
                wanted = {
                    c._id: view["values"].get(k) for k, c in views.tabs[slug].controls.items()
                }
                drawn = tuple(
                    merge_outputs(out, figures[c._id])
                    if c._id in figures
                    else gr.skip()
                    if c._id in page and c._id in wanted and same_value(page[c._id], wanted[c._id])
                    else out
                    for c, out in zip(views.outputs, drawn, strict=True)
                )
            else:
                drawn = views.apply(view, *every(tuple(values)))
                page = {c._id: v for c, v in zip(inputs, values, strict=True)}
                drawn = tuple(
                    without_shown(out, page[c._id]) if c._id in page else out
                    for c, out in zip(views.outputs, drawn, strict=True)
                )
            return (view if view else gr.skip()), *(drawn[i] for i in picks)

        def settle(*values_view_touched: Any) -> tuple:
            *values, view, touched = values_view_touched
            if shared is not None:
                # Generate's figures are the lecturer's already (its own redraws are quiet
                # while the page follows): only a control that a handler reset (a model's
                # sliders) is set again, unless the user clicked or typed meanwhile.
                page = {c._id: v for c, v in zip(inputs, values, strict=True)}
                wanted = {} if touched or not view else view["values"]
                keys = {c._id: k for k, c in views.tabs[slug].controls.items()}
                return tuple(
                    gr.update(value=wanted[keys[c._id]])
                    if keys.get(c._id) in wanted
                    and c._id in page
                    and not same_value(page[c._id], wanted[keys[c._id]])
                    else gr.skip()
                    for c in outputs
                )
            settled = views.settle_untouched(view, touched, *every(tuple(values)))
            return tuple(settled[i] for i in picks)

        private: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}
        event = polled.change(draw, [*inputs, polled], [views.view, *outputs], **private)
        # Settled as a link's view is, where a handler that a set value fires (a control's
        # .change: Generate's model resets its sliders) may reset a control; a tab with no such
        # handler (Attention) is drawn once: a settle that finds nothing changed costs gradio
        # as much as a third of the draw, for every follower at every change.
        controls = {c._id for c in views.tabs[slug].controls.values()}
        if any(
            fn.fn is not None and any(t[0] in controls and t[1] == "change" for t in fn.targets)
            for fn in views.demo.fns.values()
        ):
            event = event.then(None, None, None, js=WAIT_UNTIL_IDLE_JS, **private)
            event = event.then(
                settle,
                [*inputs, views.view, views.touched],
                outputs,
                js=KEEP_USER_CHANGES_LAST_JS,
                # Generate's settling draws nothing: answered at once, outside the queue where
                # thirty followers' draws wait.
                **({"queue": False} if shared is not None else {}),
                **private,
            )
        event = event.then(None, views.focus, None, js=SCROLL_JS, **private)
        # Generate's step came with the view (above); a page without that shares a replay.
        replay = views._replay() if slug == "generate" and shared is None else None
        if replay is not None:
            event.then(*replay, api_visibility="private")

    def view_of(self, query: str, version: int) -> dict | None:
        """The view a room's query names, as ``Views.restore`` makes one from a link (with the
        version, so that the same view published again still counts as a change)."""
        if not query:
            return None
        return {"query": query, "version": version}
