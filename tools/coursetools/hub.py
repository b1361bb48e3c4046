"""The classroom on one server: JupyterHub for the course, every user's server in the course's
Python environment (``make hub``; docs/instructors.md, "A class on one server").

    python -m coursetools.hub --roster hub/roster.csv [--root /srv/gpucourse-hub]
                              [--url http://127.0.0.1:8000] [--auth pam|shared]

Run as root. It makes what the hub needs, says what and where, then becomes the hub, which
hub/jupyterhub_config.py configures from the same settings (GPUCOURSE_HUB_* in its environment):
- a Unix account for each roster row that has none (useradd, a home only its owner can enter);
- in the hub's folder (``--root``): exchange/, nbgrader's exchange (0777, as nbgrader wants it);
  etc/instructor and etc/student, the Jupyter configuration each role's servers read (the course
  id and the exchange; no Formgrader for students); state/ (root only: the hub's database, its
  cookie secret, the shared passwords);
- each instructor's course, ~/<course id>: nbgrader_config.py and solutions/, copied once and
  never overwritten (the Formgrader's Generate makes notebooks/; the gradebook lives there);
- the proxy, npm's configurable-http-proxy, in hub/node_modules (npm ci, the first time).

The single-user servers run the course's .venv. Where its Python lies in a folder other users
cannot enter (a pyenv under /root), each server gets a private view of the file system in which
that folder shows only the Python (a mount namespace; the rest stays hidden).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from coursetools.course import ROOT

HUB = ROOT / "hub"
PROXY = HUB / "node_modules" / ".bin" / "configurable-http-proxy"
VENV_BIN = Path(sys.executable).parent  # not resolved: the .venv's bin, not its base Python's
COURSE_ID = re.search(r'course_id = "([^"]+)"', (ROOT / "nbgrader_config.py").read_text())[1]
ROLES = ("instructor", "student")
USERNAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# A student's servers show no Formgrader and no course tools (nbgrader's own advice for a hub).
STUDENT_SERVER = {
    "ServerApp": {
        "jpserver_extensions": {
            "nbgrader.server_extensions.formgrader": False,
            "nbgrader.server_extensions.course_list": False,
        }
    }
}
STUDENT_LAB = {
    "disabledExtensions": {
        f"@jupyter/nbgrader:{name}": True
        for name in ("formgrader", "create-assignment", "course-list")
    }
}


@dataclass(frozen=True)
class Settings:
    roster: Path
    root: Path = Path("/srv/gpucourse-hub")
    url: str = "http://127.0.0.1:8000"
    auth: str = "pam"  # pam: Unix passwords; shared: one password for students, one for instructors

    @classmethod
    def from_env(cls, environ=os.environ) -> Settings:
        keys = {"roster": Path, "root": Path, "url": str, "auth": str}
        found = {
            k: kind(environ[f"GPUCOURSE_HUB_{k.upper()}"])
            for k, kind in keys.items()
            if environ.get(f"GPUCOURSE_HUB_{k.upper()}")
        }
        return cls(**found)

    def env(self) -> dict[str, str]:
        return {f"GPUCOURSE_HUB_{k.upper()}": str(v) for k, v in vars(self).items()}

    @property
    def exchange(self) -> Path:
        return self.root / "exchange"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def etc(self, role: str) -> Path:
        return self.root / "etc" / role


def read_roster(path: Path) -> dict[str, str]:
    """username -> role, from a CSV file with the columns username and role (``#`` comments)."""
    lines = [line for line in Path(path).read_text().splitlines() if not line.startswith("#")]
    roster = {}
    for n, row in enumerate(csv.DictReader(lines), 2):
        name, role = (row.get("username") or "").strip(), (row.get("role") or "").strip()
        if not USERNAME.fullmatch(name) or role not in ROLES or name in roster:
            raise ValueError(
                f"{path}, row {n}: want a new Unix user name (lower case) and a role of {ROLES}, "
                f"got {name!r}, {role!r}"
            )
        roster[name] = role
    if "instructor" not in roster.values():
        raise ValueError(f"{path}: no instructor (a row `name,instructor`)")
    return roster


def course_dir(user: str) -> Path:
    """Where an instructor's course lives: their server's root, where the Formgrader runs."""
    return Path(pwd.getpwnam(user).pw_dir) / COURSE_ID


def ensure_proxy() -> Path:
    """configurable-http-proxy in hub/node_modules, installed from hub/package-lock.json."""
    if not PROXY.exists():
        if shutil.which("npm") is None:
            raise SystemExit("the hub's proxy comes from npm: install Node.js 20 or later and npm")
        command = ["npm", "ci", "--prefix", str(HUB), "--no-audit", "--no-fund", "--loglevel=error"]
        subprocess.run(command, check=True)
    return PROXY


def hidden_folders(paths: list[str]) -> dict[str, list[str]]:
    """{the first folder other users cannot enter on the way to a path: the paths behind it}."""
    found: dict[str, list[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for i in range(2, len(parts)):
            folder = os.path.join(*parts[:i])
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                found.setdefault(folder, []).append(path)
                break
    return found


def server_paths() -> list[str]:
    """The folders a user's server imports from (the .venv, its base Python, the course tools)."""
    from coursetools.grading.sandbox import python_dirs

    return python_dirs(str(VENV_BIN / "python"))


_LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x20000, 2, 4, 4096, 16384, 1 << 18
MS_MOVE = 8192


def _mount(source, target, kind, flags: int, options) -> None:
    if _LIBC.mount(source, str(target).encode(), kind, flags, options) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def private_view(hidden: dict[str, list[str]], stage: str) -> None:
    """From now on, in this (root) process: each hidden folder an empty tmpfs but for its paths,
    bound from the real ones (put together in ``stage``, an empty folder, then moved there).
    Called between fork and exec, before the switch to the user."""
    if _LIBC.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    _mount(b"none", "/", None, MS_REC | MS_PRIVATE, None)
    for folder, paths in hidden.items():
        _mount(b"tmpfs", stage, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755")
        for path in paths:
            inside = os.path.join(stage, os.path.relpath(path, folder))
            os.makedirs(inside)
            _mount(path.encode(), inside, None, MS_BIND | MS_REC, None)
        _mount(stage.encode(), folder, None, MS_MOVE, None)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def write_configs(etc: Path, exchange: Path) -> None:
    """etc/instructor and etc/student: what each role's servers read (JUPYTER_CONFIG_PATH), here
    and in the image hub/Dockerfile builds for Kubernetes."""
    nbgrader = (
        f"c = get_config()  # noqa: F821 (written by coursetools.hub)\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
    )
    for role in ROLES:
        _write(etc / role / "nbgrader_config.py", nbgrader)
    _write(etc / "student" / "jupyter_server_config.json", json.dumps(STUDENT_SERVER))
    _write(etc / "student" / "labconfig" / "page_config.json", json.dumps(STUDENT_LAB))


def prepare(settings: Settings) -> dict[str, str]:
    """Accounts, exchange, configuration and the instructors' courses (idempotent); the roster."""
    if os.geteuid() != 0:
        raise SystemExit(
            "make hub runs as root: it starts each user's server as that Unix user (JupyterHub's "
            "LocalProcessSpawner) and creates the roster's accounts"
        )
    roster = read_roster(settings.roster)
    hidden = hidden_folders(server_paths())
    if hidden and subprocess.run(["unshare", "--mount", "true"]).returncode != 0:
        raise SystemExit(
            f"the course's Python lies in {', '.join(hidden)}, which other users cannot enter, and "
            "this machine lets the hub make no private view: build .venv from a Python every user "
            "can run (make PYTHON=/usr/bin/python3.11 ...)"
        )
    for user in roster:
        if subprocess.run(["id", "-u", user], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True)
        account = pwd.getpwnam(user)
        if account.pw_uid < 1000:
            raise SystemExit(f"{settings.roster}: {user} is a system account, not a class member")
        Path(account.pw_dir).chmod(0o700)
    settings.state.mkdir(parents=True, exist_ok=True)
    settings.state.chmod(0o700)
    (settings.state / "view").mkdir(exist_ok=True)  # where private_view puts a view together
    settings.exchange.mkdir(parents=True, exist_ok=True)
    settings.exchange.chmod(0o777)
    settings.root.chmod(0o755)
    write_configs(settings.root / "etc", settings.exchange)
    for user in (u for u, role in roster.items() if role == "instructor"):
        course = course_dir(user)
        if not course.exists():
            course.mkdir()
            shutil.copy(ROOT / "nbgrader_config.py", course)
            ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
            shutil.copytree(ROOT / "solutions", course / "solutions", ignore=ignore)
            subprocess.run(["chown", "-R", f"{user}:", str(course)], check=True)
    ensure_proxy()
    return roster


def shared_passwords(settings: Settings, environ=os.environ) -> tuple[str, str]:
    """(students', instructors') passwords for --auth shared: GPUCOURSE_HUB_PASSWORD and
    GPUCOURSE_HUB_ADMIN_PASSWORD, else made once and kept in state/ (root only)."""
    kept = settings.state / "shared-passwords.json"
    if not kept.exists():
        made = {"student": secrets.token_urlsafe(9), "instructor": secrets.token_urlsafe(24)}
        _write(kept, json.dumps(made), mode=0o600)
    made = json.loads(kept.read_text())
    return (
        environ.get("GPUCOURSE_HUB_PASSWORD") or made["student"],
        environ.get("GPUCOURSE_HUB_ADMIN_PASSWORD") or made["instructor"],
    )


def summary(settings: Settings, roster: dict[str, str]) -> str:
    people = {role: [u for u, r in roster.items() if r == role] for role in ROLES}
    lines = [
        f"JupyterHub for {COURSE_ID}: {settings.url}/ (log in as a roster user)",
        f"  instructor: {', '.join(people['instructor'])} (hub admin; the course and the "
        f"Formgrader in {', '.join(str(course_dir(u)) for u in people['instructor'])})",
        f"  students:   {', '.join(people['student']) or '(none)'}",
        f"  exchange:   {settings.exchange}",
        f"  hub state:  {settings.state}; every server runs {VENV_BIN}/jupyterhub-singleuser",
    ]
    if settings.auth == "shared":
        student, instructor = shared_passwords(settings)
        lines.append(f"  passwords:  students {student}, instructors {instructor}")
    else:
        lines.append("  passwords:  each user's Unix password (set them with passwd or chpasswd)")
    lines.append("Users' servers outlive a hub restart; stop them from the hub's admin page.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="make hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--roster", type=Path, required=True, help="CSV: username,role")
    parser.add_argument("--root", type=Path, default=Settings.root)
    parser.add_argument("--url", default=Settings.url, help="where the hub listens")
    parser.add_argument("--auth", choices=("pam", "shared"), default=Settings.auth)
    args = parser.parse_args(argv)
    if not args.roster.is_file():
        example = HUB / "roster.example.csv"
        raise SystemExit(f"no roster {args.roster}: copy {example} there and list your class")
    settings = Settings(args.roster.resolve(), args.root.resolve(), args.url.rstrip("/"), args.auth)
    roster = prepare(settings)
    print(summary(settings, roster), flush=True)
    config = HUB / "jupyterhub_config.py"
    hub = str(VENV_BIN / "jupyterhub")
    os.chdir(settings.state)
    os.execve(hub, [hub, "-f", str(config)], {**os.environ, **settings.env()})


if __name__ == "__main__":
    main()
