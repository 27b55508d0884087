"""The FreeBSD rc.d script. FreeBSD's rc.subr and daemon(8) are not here: the script is checked
for syntax by sh, and sourced with a stand-in for rc.subr's two functions that prints what
``service colibri start`` would run; the colibri command in it is then run for real."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from tests.test_systemd_unit import serves_on_a_scratch_root

SCRIPT = Path(__file__).parent.parent / "contrib" / "freebsd" / "colibri"

#: load_rc_config applies rc.conf (here: the variables given); run_rc_command prints what rc.subr
#: would use to start, find and stop the service.
RC_SUBR = """
load_rc_config() { :; }
run_rc_command() {
    printf 'rcvar=%s\\n' "$rcvar"
    printf 'pidfile=%s\\n' "$pidfile"
    printf 'sig_stop=%s\\n' "$sig_stop"
    printf 'env=%s\\n' "$colibri_env"
    printf 'precmd=%s\\n' "$start_precmd"
    printf 'start=%s %s\\n' "$command" "$command_args"
    if [ -n "$RUN_PRECMD" ]; then "$start_precmd"; fi
}
"""


def rc(tmp_path: Path, precmd: bool = False, **rc_conf: str) -> dict[str, str]:
    """What the script hands rc.subr, with ``rc_conf`` set as /etc/rc.conf would set it; with
    ``precmd``, also each install(1) its start_precmd runs (``install.N``: the arguments),
    recorded by a stand-in install on the PATH."""
    tools = tmp_path / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    recorder = tools / "install"
    recorder.write_text('#!/bin/sh\nn=$(ls "$RECORD" | wc -l)\necho "$*" > "$RECORD/$n"\n')
    recorder.chmod(0o755)
    record = tmp_path / "installs"
    record.mkdir(exist_ok=True)
    stand_in = tmp_path / "rc.subr"
    stand_in.write_text(RC_SUBR)
    script = tmp_path / "colibri"
    script.write_text(SCRIPT.read_text().replace(". /etc/rc.subr", f". {stand_in}"))
    settings = "".join(f"{key}={shlex.quote(value)}\n" for key, value in rc_conf.items())
    env = {"PATH": f"{tools}:/usr/bin:/bin", "RECORD": str(record)}
    if precmd:
        env["RUN_PRECMD"] = "1"
    result = subprocess.run(
        ["sh", "-c", f'{settings}. "$0" start', str(script)],
        capture_output=True, text=True, timeout=30, check=True, env=env,
    )  # fmt: skip
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines())
    for n, made in enumerate(sorted(record.iterdir(), key=lambda p: int(p.name))):
        seen[f"install.{n}"] = made.read_text().strip()
    return seen


def daemon_argv(start: str) -> tuple[list[str], list[str]]:
    """daemon(8)'s options, and the command it supervises."""
    argv = shlex.split(start)
    assert argv[0] == "/usr/sbin/daemon"
    options: list[str] = []
    rest = argv[1:]
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        options.append(flag)
        if flag in ("-P", "-p", "-t", "-o", "-u", "-R", "-m", "-T", "-l", "-s"):
            options.append(rest.pop(0))
    return options, rest


def test_the_script_is_valid_sh() -> None:
    for shell in ("sh", "dash", "bash"):
        if shutil.which(shell):
            subprocess.run([shell, "-n", str(SCRIPT)], check=True, timeout=30)


def test_the_script_follows_rc_subr(tmp_path: Path) -> None:
    text = SCRIPT.read_text()
    for header in ("# PROVIDE: colibri", "# REQUIRE: LOGIN", "# KEYWORD: shutdown"):
        assert header in text
    assert 'name="colibri"' in text and 'rcvar="colibri_enable"' in text
    assert ': "${colibri_enable:=NO}"' in text  # off until enabled
    seen = rc(tmp_path)
    assert seen["rcvar"] == "colibri_enable"
    assert seen["sig_stop"] == "TERM"
    assert seen["pidfile"] == "/var/run/colibri/colibri.pid"
    assert "/usr/local/bin" in seen["env"].split(":")  # sessions find the ports' programs
    options, command = daemon_argv(seen["start"])
    # Supervised (-r), the supervisor's pid in the pidfile rc.subr signals (-P; -p would name
    # the child, and stopping it would only restart it), as the colibri user, log reopened on
    # SIGHUP for newsyslog.
    assert "-r" in options and "-H" in options and "-p" not in options
    assert options[options.index("-P") + 1] == seen["pidfile"]
    assert options[options.index("-u") + 1] == "colibri"
    assert options[options.index("-o") + 1] == "/var/log/colibri/colibri.log"
    assert command == ["/usr/local/bin/colibri", "--root", "/var/db/colibri", "run",
                       "--log-format", "json"]  # fmt: skip


def test_rc_conf_settings_reach_the_command(tmp_path: Path) -> None:
    seen = rc(
        tmp_path, colibri_user="builds", colibri_root="/tank/colibri",
        colibri_program="/opt/colibri/bin/colibri",
        colibri_flags="--listen tcp://0.0.0.0:7433 --log-level debug",
    )  # fmt: skip
    options, command = daemon_argv(seen["start"])
    assert options[options.index("-u") + 1] == "builds"
    assert command == ["/opt/colibri/bin/colibri", "--root", "/tank/colibri", "run",
                       "--listen", "tcp://0.0.0.0:7433", "--log-level", "debug"]  # fmt: skip


def test_the_scripts_command_starts_a_daemon_that_serves(tmp_path: Path) -> None:
    """The colibri command the script supervises, with this environment's colibri and a
    scratch root; SIGTERM (the script's sig_stop, which daemon(8) passes on) stops it, exit 0."""
    _options, command = daemon_argv(rc(tmp_path)["start"])
    assert command[1:4] == ["--root", "/var/db/colibri", "run"]
    serves_on_a_scratch_root(tmp_path, command[3:])


def test_the_prestart_makes_the_root_private_and_never_remodes_a_shared_folder(
    tmp_path: Path,
) -> None:
    seen = rc(tmp_path, precmd=True)
    assert seen["install.0"] == "-d -o colibri -g colibri -m 0700 /var/db/colibri"
    assert seen["install.1"] == "-d -o root -g wheel -m 0755 /var/run/colibri"
    # /var/log/colibri is made when missing; an existing folder (here /usr/bin) is left as is.
    assert seen["install.2"] == "-d -o root -g wheel -m 0750 /var/log/colibri"
    kept = rc(tmp_path / "again", precmd=True, colibri_logfile="/usr/bin/colibri.log")
    assert "install.2" not in kept and kept["install.1"].endswith("/var/run/colibri")
