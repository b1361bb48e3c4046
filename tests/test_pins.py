"""The course environment is pinned in one place; everything else derives from it."""

import subprocess
import sys

import coursekit as ck
import tomllib

sys.path.insert(0, str(ck.ROOT / "tools"))
import sync_pins  # noqa: E402

PROJECT = tomllib.loads((ck.ROOT / "pyproject.toml").read_text())["project"]


def test_derived_files_are_up_to_date():
    result = subprocess.run([sys.executable, "tools/sync_pins.py", "--check"], cwd=ck.ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_course_extra_pins_every_package_exactly():
    for requirement in PROJECT["optional-dependencies"]["course"]:
        assert "==" in requirement, f"{requirement!r} must be pinned with =="


def test_the_helper_itself_never_names_a_framework():
    names = {sync_pins.package_name(r.replace(">=", "==")) for r in PROJECT["dependencies"]}
    assert not names & {"torch", "tensorflow", "torchvision", "nvidia-dali-cuda120"}
    assert all("==" not in r for r in PROJECT["dependencies"]), "the helper's own requirements stay loose"


def test_environment_yml_and_binder_carry_the_same_pins():
    pins = PROJECT["optional-dependencies"]["course"]
    env = (ck.ROOT / "environment.yml").read_text()
    binder = (ck.ROOT / "binder" / "requirements.txt").read_text().splitlines()
    for pin in pins:
        assert f'"{pin}"' in env
        if sync_pins.package_name(pin) in sync_pins.NOT_ON_BINDER:
            assert not any(line.startswith(sync_pins.package_name(pin)) for line in binder)
        else:
            assert pin.split(";")[0].strip() in binder


def test_a_changed_pin_changes_the_derived_files(tmp_path):
    pyproject = (ck.ROOT / "pyproject.toml").read_text()
    pin = next(p for p in PROJECT["optional-dependencies"]["course"] if p.startswith("tqdm=="))
    (tmp_path / "pyproject.toml").write_text(pyproject.replace(pin, "tqdm==0.0.0"))
    outputs = sync_pins.outputs(tmp_path)
    assert '"tqdm==0.0.0"' in outputs[tmp_path / "environment.yml"]
    assert "tqdm==0.0.0" in outputs[tmp_path / "binder" / "requirements.txt"]
