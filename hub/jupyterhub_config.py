"""JupyterHub for the course on one server. `make hub` (coursetools.hub) prepares the machine and
starts the hub with this file; its settings come from the environment (GPUCOURSE_HUB_*).

- Users: the roster's, each a Unix account; instructors are the hub's admins.
- Servers: each user's own process, as that user (LocalProcessSpawner), the course's .venv's
  jupyterhub-singleuser opening JupyterLab. An instructor's opens on their course (~/<course id>),
  where the Formgrader and `python -m coursetools.grading` work; a student's opens on their home,
  without the Formgrader. Both read the course id and nbgrader's exchange from the hub's etc/<role>.
- A restart of the hub keeps its users, tokens and everyone's running servers and kernels.
- GPUCOURSE_HUB_API_TOKEN, where set, is a service's token that manages users, servers and
  tokens (for scripts and tests).
"""

import os
from urllib.parse import urlsplit

from coursetools import hub as course
from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821 (provided by JupyterHub)
settings = course.Settings.from_env()
roster = course.read_roster(settings.roster)
HIDDEN = course.hidden_folders(course.server_paths())  # what the servers need a private view for

c.JupyterHub.bind_url = settings.url
# the hub's own API and the proxy's on the two ports after the hub's, on this machine only
port = urlsplit(settings.url).port or 80
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{port + 1}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{port + 2}"
c.JupyterHub.db_url = f"sqlite:///{settings.state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(settings.state / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.command = [str(course.PROXY)]
c.ConfigurableHTTPProxy.pid_file = str(settings.state / "proxy.pid")
c.JupyterHub.cleanup_servers = False  # a hub restart leaves the class's servers running

c.Authenticator.allowed_users = set(roster)
c.Authenticator.admin_users = {user for user, role in roster.items() if role == "instructor"}
if settings.auth == "shared":  # a workshop: anyone with the students' password is any student
    c.JupyterHub.authenticator_class = "shared-password"
    student, instructor = course.shared_passwords(settings)
    c.SharedPasswordAuthenticator.user_password = student
    c.SharedPasswordAuthenticator.admin_password = instructor
else:
    c.JupyterHub.authenticator_class = "pam"

if token := os.environ.get("GPUCOURSE_HUB_API_TOKEN"):
    c.JupyterHub.services = [{"name": "course-admin", "api_token": token}]
    scopes = ["admin:users", "admin:servers", "tokens", "access:servers"]
    c.JupyterHub.load_roles = [
        {"name": "course-admin", "scopes": scopes, "services": ["course-admin"]}
    ]


class CourseSpawner(LocalProcessSpawner):
    """LocalProcessSpawner that starts the server in its working folder, in a private view of
    the file system where the course's Python lies in a folder others cannot enter."""

    def make_preexec_fn(self, name):
        switch_user, workdir = super().make_preexec_fn(name), self.notebook_dir

        def preexec():
            if HIDDEN:
                course.private_view(HIDDEN, str(settings.state / "view"))
            switch_user()
            os.chdir(workdir)  # nbgrader reads the course's nbgrader_config.py from here

        return preexec


def by_role(spawner):
    """The instructor's server opens on the course, a student's on their home."""
    instructor = roster[spawner.user.name] == "instructor"
    home = os.path.expanduser(f"~{spawner.user.name}")
    spawner.notebook_dir = str(course.course_dir(spawner.user.name)) if instructor else home
    etc = settings.etc("instructor" if instructor else "student")
    spawner.environment = {**spawner.environment, "JUPYTER_CONFIG_PATH": str(etc)}


c.JupyterHub.spawner_class = CourseSpawner
c.Spawner.cmd = [str(course.VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.pre_spawn_hook = by_role
c.Spawner.environment = {"PATH": f"{course.VENV_BIN}:/usr/local/bin:/usr/bin:/bin"}
c.Spawner.http_timeout = 120  # a first start on a busy 2-core machine
