"""The classroom on a real JupyterHub (`make hub`: coursetools.hub and hub/jupyterhub_config.py),
lesson 01 end to end over HTTP, as its users work in JupyterLab.

One hub on this machine, started as `make hub` starts it (as root, the proxy from npm), three
Unix accounts made for the run from a roster (an instructor and two students, new names each run,
removed afterwards), each user's own server, each user's own API token:

    instructor  Formgrader: generate, release                  (the Formgrader's REST API)
    students    Assignment List: list, fetch; write the answers through the contents API (the
                solution's, and lesson 01's partly_right fixture); submit
    (the hub restarts: users, tokens, running servers and submissions all still there)
    instructor  Formgrader: collect, autograde each (in the sandbox), feedback for all, release it
    students    Assignment List: fetch feedback; each reads their own

Then the gradebook's scores (full marks; partly_right loses exactly its answers' test cells) and
each student's feedback page agree, and the walls hold: a student, as a Unix user, can read
neither the other's work nor the instructor's course, and cannot list the exchange's submissions
(which a known path does open: the shared-folder exchange's limit, docs/instructors.md); over HTTP
a student's token opens neither the other's server nor the Formgrader. test_classroom.py checks
the rest of the loop (hand grading, the report, hidden tests) on the command line. With Chromium,
a student's Assignment List in JupyterLab: test-artifacts/hub-assignment-list.png.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import coursekit as ck
import nbformat
import pytest
import requests
from browserkit import chromium_page, screenshot, why_no_browser
from coursetools import hub as course_hub
from coursetools.grading.sandbox import sandbox_problem

LESSON = ck.CLASSROOM_LESSON
NOTEBOOK = ck.solution_path(LESSON).name
WRONG = "partly_right"  # tests/fixtures/01_verify_gpu/partly_right.py
COURSE = course_hub.COURSE_ID
ARTIFACTS = ck.ROOT / "test-artifacts"
STUDENT_PASSWORD = secrets.token_urlsafe(12)


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "make hub runs as root (each user's server as its Unix user)"
    if shutil.which("useradd") is None:
        return "no useradd to make the class's Unix accounts"
    if not course_hub.PROXY.exists() and shutil.which("npm") is None:
        return "no npm to install the hub's proxy (configurable-http-proxy)"
    return sandbox_problem()


def free_port() -> int:
    """A port with the two after it free too (the hub's API and the proxy's)."""
    for _ in range(100):
        port = random.randrange(20_000, 60_000)
        with contextlib.ExitStack() as stack:
            try:
                for p in range(port, port + 3):
                    s = stack.enter_context(socket.socket())
                    s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


class Hub:
    """`make hub`'s hub, run by this test: its process, its log, and an HTTP session per user."""

    def __init__(self, root: Path, roster: dict[str, str]):
        self.root, self.roster = root, roster
        self.url = f"http://127.0.0.1:{free_port()}"
        (root / "roster.csv").write_text(
            "username,role\n" + "".join(f"{u},{r}\n" for u, r in roster.items())
        )
        self.token = secrets.token_hex(16)
        self.admin = requests.Session()
        self.admin.headers["Authorization"] = f"token {self.token}"
        self.users: dict[str, requests.Session] = {}
        self.proc: subprocess.Popen | None = None
        self.log = root / "hub.log"
        self.timeline: list[str] = []
        self._since = time.monotonic()

    def mark(self, what: str) -> None:
        """One line of test-artifacts/hub-timeline.txt: what was done, and the seconds it took."""
        now = time.monotonic()
        self.timeline.append(f"{now - self._since:5.1f} s  {what}")
        self._since = now

    def start(self) -> None:
        env = {
            **os.environ,
            "GPUCOURSE_HUB_API_TOKEN": self.token,
            "GPUCOURSE_HUB_PASSWORD": STUDENT_PASSWORD,
            "GPUCOURSE_HUB_ADMIN_PASSWORD": secrets.token_urlsafe(32),
        }
        args = ["--roster", str(self.root / "roster.csv"), "--root", str(self.root / "hub")]
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "coursetools.hub",
                    *args,
                    "--url",
                    self.url,
                    "--auth",
                    "shared",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the hub stopped:\n{self.log_tail()}"
            with contextlib.suppress(requests.ConnectionError):
                if self.admin.get(f"{self.url}/hub/api/").ok:
                    return
            time.sleep(0.3)
        raise AssertionError(f"the hub did not answer in 90 s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text().splitlines()[-40:])

    def server(self, user: str) -> dict:
        model = self.admin.get(f"{self.url}/hub/api/users/{user}")
        model.raise_for_status()
        return model.json()["servers"].get("", {})

    def spawn_all(self) -> None:
        """Every user's server started at once, then each user's own token."""
        with ThreadPoolExecutor(len(self.roster)) as pool:
            for r in pool.map(
                lambda u: self.admin.post(f"{self.url}/hub/api/users/{u}/server"), self.roster
            ):
                assert r.status_code in (201, 202), r.text
        deadline = time.monotonic() + 120
        while not all(self.server(u).get("ready") for u in self.roster):
            assert time.monotonic() < deadline, f"servers not ready:\n{self.log_tail()}"
            time.sleep(0.3)
        for user in self.roster:
            r = self.admin.post(f"{self.url}/hub/api/users/{user}/tokens", json={"note": "test"})
            r.raise_for_status()
            self.users[user] = requests.Session()
            self.users[user].headers["Authorization"] = f"token {r.json()['token']}"

    def call(self, user: str, method: str, path: str, *, on: str | None = None, **kw):
        """``user``'s request to the server of ``on`` (their own by default); the JSON answer."""
        r = self.users[user].request(method, f"{self.url}/user/{on or user}/{path}", **kw)
        r.raise_for_status()
        return r.json() if r.content else None

    def nbgrader(self, user: str, action: str) -> list[dict]:
        """The Assignment List's buttons (nbgrader's assignment_list server extension)."""
        form = {"course_id": COURSE, "assignment_id": LESSON}
        if action == "list":
            said = self.call(user, "GET", "assignments", params={"course_id": COURSE})
        else:
            said = self.call(user, "POST", f"assignments/{action}", data=form)
        assert said["success"], f"{user}: {action}: {said}"
        return said["value"]

    def formgrader(self, user: str, path: str) -> str:
        said = self.call(user, "POST", f"formgrader/api/{path}")
        assert said["success"], f"{path}: {said.get('error')}\n{said.get('log')}"
        return said.get("log", "")

    def cleanup(self) -> None:
        """The hub, then whatever runs as the run's users (their servers outlive the hub), then
        the users and their homes."""
        self.stop()
        pids = {}
        for user in self.roster:
            ps = subprocess.run(["ps", "-o", "pid=", "-u", user], capture_output=True, text=True)
            pids |= {int(pid): user for pid in ps.stdout.split()}
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline:
                pids = {p: u for p, u in pids.items() if alive(p)}
                time.sleep(0.1)
        for user in self.roster:
            subprocess.run(["userdel", "--remove", user], capture_output=True)


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def as_user(user: str, *command: str) -> subprocess.CompletedProcess:
    """``command`` run as the Unix user ``user`` (no hub involved)."""
    ids = pwd.getpwnam(user)
    switch = ["setpriv", f"--reuid={ids.pw_uid}", f"--regid={ids.pw_gid}", "--init-groups"]
    return subprocess.run([*switch, *command], capture_output=True, text=True)


def expected_scores(wrong: set[str]) -> dict[str, float]:
    source = ck.read(ck.solution_path(LESSON))
    answer_ids = [c.metadata.nbgrader.grade_id for c in ck.nbgrader_cells(source, "answer")]
    return {
        c.metadata.nbgrader.grade_id: (
            0.0 if ck.answer_of(c.metadata.nbgrader.grade_id, answer_ids) in wrong
            else float(c.metadata.nbgrader.points)
        )
        for c in ck.nbgrader_cells(source, "test")
    }  # fmt: skip


@pytest.fixture
def hub():
    if why := why_not():
        pytest.skip(why)
    tag = secrets.token_hex(3)
    roster = {f"gc{tag}t": "instructor", f"gc{tag}a": "student", f"gc{tag}b": "student"}
    root = Path(tempfile.mkdtemp(prefix="gpucourse-hub-"))
    root.chmod(0o755)  # the users' servers read the hub's etc/ and the exchange in there
    the_hub = Hub(root, roster)
    try:
        yield the_hub
    finally:
        the_hub.cleanup()
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(the_hub.log, ARTIFACTS / "hub.log")
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.ci_required
def test_one_assignment_through_the_hub(hub):
    started = time.monotonic()
    teacher, alice, bob = hub.roster
    fixture = next(f for f in ck.fixtures(LESSON) if f.name == WRONG)
    answers = {
        alice: ck.solution_answers(LESSON),
        bob: {**ck.solution_answers(LESSON), **fixture.answers},
    }
    wrong = {alice: set(), bob: fixture.wrong}
    hub.start()
    hub.mark("make hub: accounts, exchange, the instructor's course; the hub answers")
    hub.spawn_all()
    hub.mark("three servers started at once; a token each")

    hub.formgrader(teacher, f"assignment/{LESSON}/assign")  # generate: notebooks/, the gradebook
    hub.formgrader(teacher, f"assignment/{LESSON}/release")
    hub.mark(f"instructor: Formgrader, generate and release {LESSON}")
    home = {user: Path(pwd.getpwnam(user).pw_dir) for user in hub.roster}
    for student in (alice, bob):
        (listed,) = hub.nbgrader(student, "list")
        assert (listed["assignment_id"], listed["status"]) == (LESSON, "released"), listed
        (fetched,) = hub.nbgrader(student, "fetch")
        assert fetched["status"] == "fetched" and fetched["path"] == LESSON, fetched
        path = f"{LESSON}/{NOTEBOOK}"
        assert (home[student] / path).read_bytes() == ck.student_path(LESSON).read_bytes(), (
            "students get the committed notebooks/"
        )
        nb = hub.call(student, "GET", f"api/contents/{path}")["content"]
        work = ck.submission_from(nbformat.from_dict(nb), answers[student])
        hub.call(student, "PUT", f"api/contents/{path}", json={"type": "notebook", "content": work})
        states = {a["status"] for a in hub.nbgrader(student, "submit")}
        assert states == {"fetched", "submitted"}, states
        hub.mark(f"{student}: list, fetch, answer (contents API), submit")

    # A restart of the hub: the same users, tokens and running servers, the submissions in place.
    before = {user: hub.server(user)["started"] for user in hub.roster}
    hub.stop()
    hub.start()
    hub.mark("the hub restarted")
    assert {user: hub.server(user).get("started") for user in hub.roster} == before
    for student in (alice, bob):
        (submitted,) = [a for a in hub.nbgrader(student, "list") if a["status"] == "submitted"]
        assert len(submitted["submissions"]) == 1, submitted

    assert "Collecting submission" in hub.formgrader(teacher, f"assignment/{LESSON}/collect")
    hub.mark("instructor: collect")
    for student in (alice, bob):
        log = hub.formgrader(teacher, f"submission/{LESSON}/{student}/autograde")
        assert "the slowest cell" in log, (
            f"graded by the course's GradingExecute (sandboxed):\n{log}"
        )
        hub.mark(f"instructor: autograde {student}")
    hub.formgrader(teacher, f"assignment/{LESSON}/generate_feedback")
    hub.formgrader(teacher, f"assignment/{LESSON}/release_feedback")
    hub.mark("instructor: generate and release feedback")

    course = home[teacher] / COURSE
    for student in (alice, bob):
        expected = expected_scores(wrong[student])
        got = ck.scores(course, LESSON, student)
        assert {t: got[t][0] for t in expected} == expected, f"{student}'s autograded scores"
        assert any(s == 0 for s in expected.values()) == (student == bob)
        hub.nbgrader(student, "fetch_feedback")
        (stamp,) = hub.call(student, "GET", f"api/contents/{LESSON}/feedback")["content"]
        page = hub.call(student, "GET", f"api/contents/{stamp['path']}/{NOTEBOOK[:-6]}.html")
        shown = re.findall(
            r"Grade cell: <code>(\w+)</code>.*?Score: ([\d.]+) / [\d.]+", page["content"], re.S
        )
        assert {t: float(s) for t, s in shown} == expected, f"{student}'s feedback shows the scores"
    hub.mark("scores checked; each student fetched and read their feedback")

    # The walls, as Unix users: bob reads his own things and what was released, nothing of
    # alice's or the instructor's; the exchange's inbound cannot be listed.
    exchange = hub.root / "hub" / "exchange" / COURSE
    assert as_user(alice, "cat", str(home[alice] / LESSON / NOTEBOOK)).returncode == 0
    assert as_user(bob, "ls", str(exchange / "outbound" / LESSON)).returncode == 0
    walls = [
        ("cat", home[alice] / LESSON / NOTEBOOK),
        ("cat", course / "solutions" / LESSON / NOTEBOOK),
        ("cat", course / "submitted" / alice / LESSON / NOTEBOOK),
        ("cat", course / "gradebook.db"),
        ("ls", exchange / "inbound"),
        ("ls", exchange / "feedback"),
    ]
    for command, path in walls:
        said = as_user(bob, command, str(path))
        assert said.returncode != 0 and "Permission denied" in said.stderr, (command, path, said)
    # ... but a submission's own folder is open to whoever knows its name (nbgrader makes it
    # 0777, its files 0644): only the unlistable inbound and a random suffix in the name hide it.
    (alices,) = [p for p in (exchange / "inbound").iterdir() if p.name.startswith(f"{alice}+")]
    assert as_user(bob, "cat", str(alices / NOTEBOOK)).returncode == 0
    # over HTTP: bob's token opens neither alice's server nor the instructor's Formgrader
    for owner, path in ((alice, "api/contents"), (teacher, "formgrader/api/assignments")):
        r = hub.users[bob].get(f"{hub.url}/user/{owner}/{path}")
        assert r.status_code == 403, (owner, r.status_code)

    hub.mark("the walls checked")
    if why_no_browser() is None:
        shoot_assignment_list(hub, alice)
        hub.mark(f"{alice} logs in with Chromium, opens the Assignment List: a screenshot")
    hub.timeline.append(f"{time.monotonic() - started:5.1f} s  in all")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "hub-timeline.txt").write_text("\n".join(hub.timeline) + "\n")
    print("\n" + "\n".join(hub.timeline))


def shoot_assignment_list(hub: Hub, student: str) -> Path:
    """A student's Assignment List in JupyterLab, as they see it after logging in to the hub."""
    with chromium_page() as page:
        page.goto(f"{hub.url}/hub/login")
        page.fill("#username_input", student)
        page.fill("#password_input", STUDENT_PASSWORD)
        page.click("#login_submit")
        page.wait_for_url(f"**/user/{student}/lab**", timeout=120_000)
        page.locator(".lm-MenuBar-item", has_text="Nbgrader").first.click()
        page.locator('.lm-Menu-item[data-command="nbgrader:open-assignment-list"]').first.click()
        page.locator("#fetched_assignments_list .list_item").first.wait_for()
        page.locator("#submitted_assignments_list .list_item").first.wait_for()
        page.wait_for_timeout(500)
        return screenshot(page, "hub-assignment-list.png")


# ---- the Kubernetes path: Zero to JupyterHub's values, the single-user image ----

Z2JH = ck.ROOT / "hub" / "z2jh"
DOCKERFILE = ck.ROOT / "hub" / "Dockerfile"
EXCHANGE_IN_IMAGE = "/srv/nbgrader/exchange"
# KubeSpawner settings the profiles may override: the chart's schema leaves profileList open, and
# KubeSpawner is not installed here, so these names were checked by hand (kubespawner 7.1.0).
KUBESPAWNER_OVERRIDES = {
    "image", "cpu_guarantee", "cpu_limit", "mem_guarantee", "mem_limit", "extra_resource_limits",
    "extra_resource_guarantees", "tolerations", "node_selector", "environment",
}  # fmt: skip


def yaml_file(path: Path):
    import yaml

    return yaml.safe_load(path.read_text())


def coalesce(defaults: dict, values: dict) -> dict:
    """What helm validates: the chart's defaults, with the user's values merged in (maps key by
    key; null deletes a default; anything else, lists too, replaces it)."""
    merged = dict(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = value
    return merged


def schema_errors(values: dict) -> list[str]:
    from jsonschema import Draft7Validator

    schema = json.loads((Z2JH / "values.schema.json").read_text())
    merged = coalesce(yaml_file(Z2JH / "chart-values.yaml"), values)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in Draft7Validator(schema).iter_errors(merged)
    ]


def test_the_charts_files_are_its_published_ones():
    """The schema and the defaults are the chart's (README.md's sums), and agree with each other."""
    import hashlib

    readme = (Z2JH / "README.md").read_text()
    for name in ("values.schema.json", "chart-values.yaml"):
        digest = hashlib.sha256((Z2JH / name).read_bytes()).hexdigest()
        assert f"`{name}` {digest}" in readme, f"{name} is not the copy README.md describes"
    schema = json.loads((Z2JH / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema_errors({}) == [], "the chart's defaults pass its schema"


def test_the_kubernetes_values_pass_the_charts_schema():
    values = yaml_file(Z2JH / "values.yaml")
    assert schema_errors(values) == []
    typo = yaml_file(Z2JH / "values.yaml")
    typo["singleuser"]["storage"]["extraVolumeMount"] = typo["singleuser"]["storage"].pop(
        "extraVolumeMounts"
    )
    assert schema_errors(typo), "the schema rejects a misspelt key: the check can fail"

    user = values["singleuser"]
    mounts = {m["name"]: m["mountPath"] for m in user["storage"]["extraVolumeMounts"]}
    claims = {v["name"]: v.get("persistentVolumeClaim") for v in user["storage"]["extraVolumes"]}
    assert mounts["nbgrader-exchange"] == EXCHANGE_IN_IMAGE and claims["nbgrader-exchange"]
    assert f'Path("{EXCHANGE_IN_IMAGE}")' in DOCKERFILE.read_text(), "the image names that exchange"
    assert mounts["shm"] == "/dev/shm", "DataLoader workers need more than 64 MiB of /dev/shm"
    assert user["cpu"]["limit"] and user["memory"]["limit"], "every server has its limits"
    profiles = {p["slug"]: p for p in user["profileList"]}
    assert set(profiles) == {"cpu", "gpu"} and profiles["cpu"].get("default")
    gpu = profiles["gpu"]["kubespawner_override"]
    assert gpu["extra_resource_limits"] == {"nvidia.com/gpu": "1"} and gpu["image"].endswith(":gpu")
    for profile in profiles.values():
        unknown = set(profile.get("kubespawner_override", {})) - KUBESPAWNER_OVERRIDES
        assert not unknown, f"{profile['slug']}: not KubeSpawner settings: {unknown}"


def test_the_kubernetes_roles_hook():
    """hub.extraConfig's hook, run as the chart runs it: the instructor's server opens on the
    course with the instructor's configuration, a student's with the student's."""
    from traitlets.config import Config

    values = yaml_file(Z2JH / "values.yaml")
    c = Config(values["hub"]["config"])
    exec(values["hub"]["extraConfig"]["gpucourse-roles"], {"c": c})
    hook = c.KubeSpawner.pre_spawn_hook
    admins = values["hub"]["config"]["Authenticator"]["admin_users"]
    students = set(values["hub"]["config"]["Authenticator"]["allowed_users"]) - set(admins)
    for name, role in ((admins[0], "instructor"), (sorted(students)[0], "student")):
        spawner = type("Spawner", (), {"environment": {"X": "1"}, "working_dir": None})()
        spawner.user = type("User", (), {"name": name})()
        hook(spawner)
        assert spawner.environment == {"X": "1", "JUPYTER_CONFIG_PATH": f"/etc/gpucourse/{role}"}
        course = f"/home/jovyan/{COURSE}" if role == "instructor" else None
        assert spawner.working_dir == course, (name, spawner.working_dir)


def test_the_single_user_image(tmp_path):
    """What hub/Dockerfile builds from exists, its JupyterHub is the chart's major version, and
    the roles' configuration it writes is `make hub`'s. (No build: Docker does not run here.)"""
    text = DOCKERFILE.read_text()
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        *sources, _ = line.split()
        for source in sources:
            assert (ck.ROOT / source).exists(), f"COPY {source}: not in the repository"
    version = re.search(r"^ARG JUPYTERHUB_VERSION=(\S+)$", text, re.M)[1]
    app = re.search(r"appVersion \(JupyterHub\)\s+(\S+)\.", (Z2JH / "README.md").read_text())[1]
    assert version.split(".")[0] == app.split(".")[0], (version, app)
    course_hub.write_configs(tmp_path, Path(EXCHANGE_IN_IMAGE))
    config = (tmp_path / "student" / "nbgrader_config.py").read_text()
    assert f"c.Exchange.root = {EXCHANGE_IN_IMAGE!r}" in config and COURSE in config
    assert (tmp_path / "instructor" / "nbgrader_config.py").read_text() == config
    server = json.loads((tmp_path / "student" / "jupyter_server_config.json").read_text())
    assert not server["ServerApp"]["jpserver_extensions"]["nbgrader.server_extensions.formgrader"]


# ---- make hub's own parts ----


def test_a_roster_is_read_and_a_wrong_row_named(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("# the class\nusername,role\nteacher,instructor\nalice,student\n")
    assert course_hub.read_roster(roster) == {"teacher": "instructor", "alice": "student"}
    for bad in ("Alice,student", "alice,teacher", "teacher,instructor"):
        roster.write_text(f"username,role\nteacher,instructor\n{bad}\n")
        with pytest.raises(ValueError, match="row 3"):
            course_hub.read_roster(roster)
    roster.write_text("username,role\nalice,student\n")
    with pytest.raises(ValueError, match="no instructor"):
        course_hub.read_roster(roster)


def test_hidden_folders_are_the_first_others_cannot_enter():
    with tempfile.TemporaryDirectory() as tmp:  # pytest's own is in a folder only root enters
        top = Path(tmp)
        top.chmod(0o755)
        python = top / "home" / "pyenv" / "3.11"
        python.mkdir(parents=True)
        (top / "home").chmod(0o700)
        hidden = course_hub.hidden_folders([str(python)])
        if not str(top).startswith(tuple(hidden)):  # a /tmp other users can enter
            assert hidden == {str(top / "home"): [str(python)]}
            (top / "home").chmod(0o711)
            assert course_hub.hidden_folders([str(python)]) == {}
