"""The classroom benchmark's students' own sentences, and the apps it launches as
subprocesses (this checkout's and another commit's) to compare them in one run.

A lecture asks "now try your own sentence": each student types a text the lecturer never
opened, so the app's shared views cannot answer it from the cache. ``TextPool`` makes those
texts, short (about 5–15 words) and varied (English, German, French, Spanish, Chinese, Arabic,
English with emoji), every one different within a run and the same for the same seed, so that
both sides of a comparison get the same class.

``AppProcess`` launches ``python app.py --port P`` (with whatever arguments that side's app
takes, e.g. ``--workers 2``) from a checkout, waits until it answers, and reads its memory as
the sum of the resident memory of its whole process tree (several workers, a load balancer's
process, all count). ``Worktree`` checks a commit out into a temporary ``git worktree`` and
removes it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.classroom import Record, Result

# Each language's parts of a sentence: who, does what, to what, when or where. Any choice of
# one of each reads as a sentence (the subjects are singular, the verbs agree with them), of
# about 5–15 words; 8⁴ sentences a language, far more than a class types.
_PARTS: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "en": (
        ["My little sister", "The old fisherman", "A hungry cat", "Our new teacher",
         "The robot next door", "Every student in the class", "The tired pilot",
         "A curious child"],
        ["quietly paints", "forgot", "carefully reads", "loves", "is looking for",
         "never finishes", "sometimes eats", "wants to buy"],
        ["a blue bicycle", "the long letter from grandma", "three green apples",
         "the broken radio", "a book about volcanoes", "the last piece of cake",
         "a red umbrella", "the map of the city"],
        ["before breakfast", "in the pouring rain", "every Sunday morning", "after the concert",
         "at the old train station", "without telling anyone", "during the summer holidays",
         "by candlelight"],
    ),
    "de": (
        ["Meine kleine Schwester", "Der alte Fischer", "Eine hungrige Katze",
         "Unser neuer Lehrer", "Der Roboter von nebenan", "Das müde Kind", "Die Ärztin",
         "Ein neugieriger Junge"],
        ["malt", "vergaß", "liest", "liebt", "sucht", "kauft", "repariert", "verschenkt"],
        ["ein blaues Fahrrad", "den langen Brief der Großmutter", "drei grüne Äpfel",
         "das kaputte Radio", "ein Buch über Vulkane", "das letzte Stück Kuchen",
         "einen roten Regenschirm", "die Karte der Stadt"],
        ["vor dem Frühstück", "im strömenden Regen", "jeden Sonntagmorgen", "nach dem Konzert",
         "am alten Bahnhof", "ohne es jemandem zu sagen", "in den Sommerferien",
         "bei Kerzenlicht"],
    ),
    "fr": (
        ["Ma petite sœur", "Le vieux pêcheur", "Un chat affamé", "Notre nouveau professeur",
         "Le robot d'à côté", "L'enfant fatigué", "La boulangère", "Un garçon curieux"],
        ["peint", "a oublié", "lit", "adore", "cherche", "achète", "répare", "offre"],
        ["un vélo bleu", "la longue lettre de sa grand-mère", "trois pommes vertes",
         "la radio cassée", "un livre sur les volcans", "le dernier morceau de gâteau",
         "un parapluie rouge", "le plan de la ville"],
        ["avant le petit-déjeuner", "sous la pluie", "chaque dimanche matin",
         "après le concert", "à la vieille gare", "sans rien dire à personne",
         "pendant les vacances d'été", "à la lueur d'une bougie"],
    ),
    "es": (
        ["Mi hermana pequeña", "El viejo pescador", "Un gato hambriento",
         "Nuestro nuevo profesor", "El robot de al lado", "La niña cansada", "La panadera",
         "Un chico curioso"],
        ["pinta", "olvidó", "lee", "adora", "busca", "compra", "repara", "regala"],
        ["una bicicleta azul", "la larga carta de su abuela", "tres manzanas verdes",
         "la radio rota", "un libro sobre volcanes", "el último trozo de pastel",
         "un paraguas rojo", "el mapa de la ciudad"],
        ["antes del desayuno", "bajo la lluvia", "cada domingo por la mañana",
         "después del concierto", "en la vieja estación", "sin decírselo a nadie",
         "durante las vacaciones de verano", "a la luz de una vela"],
    ),
    # Chinese has no spaces: who, when or where, does what, to what, then a full stop.
    "zh": (
        ["我的妹妹", "老渔夫", "一只饥饿的猫", "我们的新老师", "隔壁的机器人", "那个累了的孩子",
         "面包师", "一个好奇的男孩"],
        ["画了", "忘了", "在读", "很喜欢", "在找", "买了", "修好了", "送了"],
        ["一辆蓝色的自行车", "奶奶写的长信", "三个绿苹果", "坏了的收音机", "一本关于火山的书",
         "最后一块蛋糕", "一把红伞", "城市地图"],
        ["早饭前", "在雨中", "每个星期天早上", "音乐会以后", "在老火车站", "悄悄地", "暑假里",
         "在烛光下"],
    ),
    "ar": (
        ["أخي الصغير", "الصياد العجوز", "قط جائع", "معلمنا الجديد", "الروبوت المجاور",
         "الطفل المتعب", "الخباز", "ولد فضولي"],
        ["يرسم", "نسي", "يقرأ", "يحب", "يبحث عن", "يشتري", "يصلح", "يهدي"],
        ["دراجة زرقاء", "رسالة جدته الطويلة", "ثلاث تفاحات خضراء", "الراديو المكسور",
         "كتابا عن البراكين", "آخر قطعة من الكعكة", "مظلة حمراء", "خريطة المدينة"],
        ["قبل الفطور", "تحت المطر", "كل صباح أحد", "بعد الحفلة", "في محطة القطار القديمة",
         "دون أن يخبر أحدا", "في العطلة الصيفية", "على ضوء الشمعة"],
    ),
}  # fmt: skip
_EMOJI = ["🚲", "🍎", "☔", "🌋", "🎂", "🤖", "🐱", "📻", "🗺️", "😴", "🎉", "👩‍🔬"]
# How often each kind of text is typed: English most, then the others alike.
LANGUAGES = {"en": 4, "de": 1, "fr": 1, "es": 1, "zh": 1, "ar": 1, "emoji": 1}


def sentence(rng: random.Random) -> str:
    """One short sentence drawn with ``rng``: a language (``LANGUAGES``' weights), then one of
    each of its parts; "emoji" is an English sentence with one to three emoji among its
    words."""
    language = rng.choices(list(LANGUAGES), list(LANGUAGES.values()))[0]
    who, does, what, when = (
        rng.choice(part) for part in _PARTS["en" if language == "emoji" else language]
    )
    if language == "zh":
        return f"{who}{when}{does}{what}。"
    if language == "ar":
        return f"{who} {does} {what} {when}."
    words = f"{who} {does} {what} {when}".split()
    if language == "emoji":
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randint(1, len(words)), rng.choice(_EMOJI))
    return " ".join(words) + rng.choice([".", "!", "?", "."])


class TextPool:
    """Every student's own texts, each different from every other text this pool has handed
    out (so that no view of one is in the server's cache from another), drawn in a fixed order
    from ``seed``: the same draws give the same texts on both sides of a comparison."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"classroom texts {seed}")
        self._used: set[str] = set()

    def draw(self, students: int, each: int) -> list[list[str]]:
        """``each`` new texts for each of ``students`` students."""
        texts = []
        for _ in range(students):
            mine: list[str] = []
            while len(mine) < each:
                text = sentence(self._rng)
                if text not in self._used:
                    self._used.add(text)
                    mine.append(text)
            texts.append(mine)
        return texts


def tree_rss_mb(pid: int) -> float:
    """The resident memory in MB of process ``pid`` and all its descendants (every worker of
    a server that runs several, its load balancer), NaN when it is gone. Pages shared between
    processes count once per process, as each process's RSS reports them."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return float("nan")
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):  # a child that ended meanwhile
            total += process.memory_info().rss
    return total / 2**20


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) used so far by ``pid`` and its living descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return float("nan")
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


class ServedApp:
    """A benchmark's own ``--serve`` process (``command``), driven through its stdin: it
    answers each command line with one JSON line on its stdout, and its first JSON line says it
    is ready (``ready``). ``name`` leads the message where it ends before it answers."""

    def __init__(
        self,
        command: list[str],
        *,
        name: str = "",
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        import json

        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                return dict(json.loads(line))
        who = f"{self.name}: " if self.name else ""
        raise SystemExit(f"{who}the app's process ended before it answered")

    def ask(self, command: str) -> dict[str, Any]:
        """The process's answer to one ``command`` line."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Ask the process to quit; kill it where it does not within a minute."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            self.process.wait(timeout=60)
        except Exception:
            self.process.kill()


class AppProcess:
    """``python app.py --port PORT --device DEVICE ARGS`` run from the checkout ``root``, its
    output in a log file; ``url`` once it answers."""

    def __init__(
        self, name: str, root: Path, port: int, device: str, args: str, log_dir: Path
    ) -> None:
        self.name, self.root, self.port = name, root, port
        self.url = f"http://127.0.0.1:{port}/"
        self.command = [sys.executable, "app.py", "--port", str(port), "--device", device,
                        *shlex.split(args)]  # fmt: skip
        self.log = log_dir / f"{name}.log"
        with open(self.log, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(
                self.command, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its workers and balancer end with it (close)
                env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
            )  # fmt: skip

    def wait_ready(self, patience: float = 300.0) -> None:
        """Return once the app's page answers; stop with its log's end if it ended first or
        did not answer within ``patience`` seconds."""
        import httpx

        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name}'s app ended (code {self.process.returncode}):\n"
                                 + self.tail())  # fmt: skip
            try:
                if httpx.get(self.url, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise SystemExit(f"{self.name}'s app did not answer in {patience:.0f} s:\n" + self.tail())

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the app's output."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def rss_mb(self) -> float:
        """The app's memory: its process tree's resident memory, in MB."""
        return tree_rss_mb(self.process.pid)

    def cpu_s(self) -> float:
        """CPU seconds the app's process tree has used."""
        return tree_cpu_s(self.process.pid)

    def close(self) -> None:
        """End the app and every process it started (its session's process group), politely
        first (SIGTERM), then for good."""
        import signal

        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)
        else:  # the app ended; a worker or balancer it started may not have
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


class Worktree:
    """Commit ``rev`` of the repository at ``repo`` checked out (detached) into a temporary
    ``git worktree``; ``close`` removes it."""

    def __init__(self, repo: Path, rev: str) -> None:
        self.repo = repo
        resolved = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
            capture_output=True, text=True,
        )  # fmt: skip
        if resolved.returncode != 0:
            raise SystemExit(f"--against: {rev!r} is not a commit of {repo}")
        self.commit = resolved.stdout.strip()
        self.path = Path(tempfile.mkdtemp(prefix=f"classroom-{self.commit[:7]}-"))
        added = subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(self.path), self.commit],
            capture_output=True, text=True,
        )  # fmt: skip
        if added.returncode != 0:
            shutil.rmtree(self.path, ignore_errors=True)
            raise SystemExit(f"git worktree add failed: {added.stderr.strip()}")
        self.subject = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--format=%h %s", self.commit],
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip

    def close(self) -> None:
        """Remove the worktree (and git's record of it)."""
        subprocess.run(
            ["git", "-C", str(self.repo), "worktree", "remove", "--force", str(self.path)],
            capture_output=True,
        )  # fmt: skip
        subprocess.run(["git", "-C", str(self.repo), "worktree", "prune"], capture_output=True)


def head(repo: Path) -> str:
    """This checkout's commit, ``+`` when its work tree has changes."""
    commit = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%h"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return commit + ("+" if dirty else "")


def sample(values: list[Any], k: int, seed: int) -> list[Any]:
    """``k`` of ``values`` chosen with ``seed`` (the same on both sides of a comparison)."""
    return random.Random(seed).sample(values, k)


# -- this checkout against another commit ------------------------------------------------------


def merged(results: list[Result]) -> Record:
    """The round trips and errors of several classes, as one record."""
    from benchmarks.classroom import Record

    record = Record()
    for result in results:
        for action, trips in result.record.trips.items():
            record.trips[action].extend(trips)
        for action, errors in result.record.errors.items():
            record.errors[action].extend(errors)
    return record


def run_against(args: argparse.Namespace) -> list[str]:
    """The same lesson (the same seed, the same students' texts) on this checkout's app and on
    commit ``args.against``'s, each launched as ``python app.py`` (with its own arguments),
    the classes alternated for ``args.rounds`` rounds; the report's lines."""
    from benchmarks.classroom import (
        SMOLLM2,
        after_class_s,
        alone,
        class_texts,
        prepare,
        run_class,
    )
    from ui.testing import free_port

    repo = Path(__file__).resolve().parent.parent
    seconds, students, model = args.minutes * 60, args.students, args.model
    architecture = "decoder-only" if model == SMOLLM2 else "encoder-decoder"
    tree = Worktree(repo, args.against)
    logs = Path(tempfile.mkdtemp(prefix="classroom-logs-"))
    apps: list[AppProcess] = []
    try:
        ports = [args.port, args.port + 1] if args.port else [free_port(), free_port()]
        sides = [
            (f"here ({head(repo)})", repo, args.args_here),
            (f"against ({tree.commit[:7]})", tree.path, args.args_against),
        ]
        for (name, root, extra), port in zip(sides, ports, strict=True):
            apps.append(AppProcess(name, root, port, args.device, extra, logs))
        print(
            f"classroom, here against {tree.subject}: {model}, {students} students, "
            f"{args.minutes:g} min a class, {args.rounds} round(s) each side, alternated; "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
            f"{time.strftime('%Y-%m-%d %H:%M')}; load average at the start "
            + " / ".join(f"{x:.1f}" for x in os.getloadavg()),
            flush=True,
        )
        for app in apps:
            print(f"- {app.name}: {' '.join(app.command[1:])} (log {app.log})", flush=True)
        cold = {}
        for app in apps:
            app.wait_ready()
            cold[app.name] = app.rss_mb()
        prepared = {}
        for app in apps:  # the lecturer's preparation, on each side
            prepare(app.url, model, architecture)
            time.sleep(2.0)  # idle: the app gives freed memory back (ui/serving/memory.py)
            prepared[app.name] = app.rss_mb()
        pool = TextPool(args.seed)
        alone_texts = pool.draw(1, args.alone_rounds)[0]
        alone_trips = {
            app.name: alone(
                app.url, model, architecture, alone_texts, args.alone_rounds, args.seed
            ).trips
            for app in apps
        }
        results: dict[str, list[Result]] = {app.name: [] for app in apps}
        for k in range(args.rounds):
            texts = class_texts(pool, students, seconds, args.seed + k, args.own_share)
            for app in apps:
                result = run_class(app.url, students, seconds, model, architecture,
                                   args.seed * 100 + k, None, texts=texts, app=app)  # fmt: skip
                results[app.name].append(result)
                print(
                    f"  round {k + 1}, {app.name}: {result.requests()} requests, "
                    f"{result.errors()} errors, worst interactive p95 "
                    f"{result.worst_interactive_p95():.2f} s, peak {result.peak:.0f} MB; "
                    "load average " + " / ".join(f"{x:.1f}" for x in os.getloadavg()),
                    flush=True,
                )
        # Everyone has left: memory once the servers have freed the sessions and forgotten
        # the class's own sentences.
        time.sleep(after_class_s())
        left = {app.name: app.rss_mb() for app in apps}
    finally:
        for app in apps:
            app.close()
        tree.close()
    shutil.rmtree(logs, ignore_errors=True)  # kept when an app failed: its log says why
    return against_report(args, apps, results, alone_trips, cold, prepared, left)


def against_report(
    args: argparse.Namespace,
    apps: list[AppProcess],
    results: dict[str, list[Result]],
    alone_trips: dict[str, dict[str, list[float]]],
    cold: dict[str, float],
    prepared: dict[str, float],
    left: dict[str, float],
) -> list[str]:
    """The comparison's tables: per side, per action, the requests, one student's p50 alone and
    the class's p50, p95 and max over every round; then the ratios here / against (alone: of
    the p50s of one student alone; then of the class's p50s and p95s)."""
    from benchmarks.classroom import COSTLY, INTERACTIVE, _p50, percentile

    lines: list[str] = []
    records = {name: merged(rs) for name, rs in results.items()}
    actions = [
        a
        for a in (*INTERACTIVE, *COSTLY)
        if any(r.trips.get(a) for r in records.values())
        or any(t.get(a) for t in alone_trips.values())
    ]
    for app in apps:
        rs, record = results[app.name], records[app.name]
        seconds = sum(r.seconds for r in rs)
        answered = sum(len(v) for v in record.trips.values())
        errors = sum(len(v) for v in record.errors.values())
        cpu = sum(r.cpu[0] for r in rs)
        lines += [
            f"### {app.name}: {args.students} students ({rs[0].own} on their own sentences), "
            f"{len(rs)} × {args.minutes:g} min",
            "",
            "| action | requests | alone p50 (s) | p50 (s) | p95 (s) | max (s) |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for action in actions:
            trips = record.trips.get(action, [])
            lines.append(
                f"| {action} | {len(trips)} | {_cell(_p50(alone_trips[app.name].get(action)))} | "
                f"{_cell(percentile(trips, 0.5) if trips else None)} | "
                f"{_cell(percentile(trips, 0.95) if trips else None)} | "
                f"{_cell(max(trips) if trips else None)} |"
            )
        lines += [
            "",
            f"Requests answered: {answered} ({answered / seconds:.1f}/s), errors: {errors}; "
            "worst interactive p95 per round: "
            + ", ".join(f"{r.worst_interactive_p95():.2f} s" for r in rs)
            + f". Server memory (its process tree): {cold[app.name]:.0f} MB started, "
            f"{prepared[app.name]:.0f} MB prepared, {max(r.peak for r in rs):.0f} MB at its "
            f"highest in class, {left[app.name]:.0f} MB after everyone left; CPU "
            f"{cpu:.0f} s in {seconds:.0f} s of class.",
        ]
        for action, messages in record.errors.items():
            lines.append(f"- {action}: {len(messages)} error(s), first: {messages[0]}")
        lines.append("")
    here, there = (records[app.name] for app in apps)

    def ratio(q: float, action: str, a: list[float], b: list[float]) -> tuple[str, str, str]:
        x = percentile(a, q) if a else None
        y = percentile(b, q) if b else None
        r = f"{x / y:.2f}" if x is not None and y else "–"
        return _cell(x), _cell(y), r

    alone_here, alone_there = (alone_trips[app.name] for app in apps)

    lines += [
        f"### Here / against: the same lesson, {args.rounds} round(s) each, alternated",
        "",
        "| action | alone ratio | here p50 (s) | against p50 (s) | p50 ratio | here p95 (s) | "
        "against p95 (s) | p95 ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for action in actions:
        a, b = here.trips.get(action, []), there.trips.get(action, [])
        cells = (
            ratio(0.5, action, alone_here.get(action, []), alone_there.get(action, []))[2],
            *ratio(0.5, action, a, b),
            *ratio(0.95, action, a, b),
        )
        lines.append(f"| {action} | " + " | ".join(cells) + " |")
    counts = [sum(len(v) for v in records[app.name].trips.values()) for app in apps]
    lines += [
        "",
        f"Requests answered: here {counts[0]}, against {counts[1]} "
        f"({counts[0] / max(1, counts[1]):.2f}); memory at its highest in class: "
        + " / ".join(f"{max(r.peak for r in results[app.name]):.0f} MB" for app in apps)
        + ". Load average at the end: "
        + " / ".join(f"{x:.1f}" for x in os.getloadavg())
        + ".",
    ]
    return lines


def _cell(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.3f}"
