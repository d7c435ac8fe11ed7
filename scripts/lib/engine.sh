# shellcheck shell=bash
# Shared setup for scripts/test, scripts/demo and scripts/build-images. Source it, then call:
#
#   ensure_docker_engine   the docker CLI, dockerd and debootstrap are installed (Debian's
#                          docker.io and debootstrap packages, installed with apt-get when
#                          missing and running as root) and `docker info` answers (dockerd
#                          is started in the background when it does not).
#   ensure_venv [ROOT]     ROOT/.venv exists and has `pip install -e '.[test]'` of ROOT's
#                          pyproject.toml (skipped while pyproject.toml is unchanged).
#
# Both return non-zero with a message on stderr that says what is missing and how to get
# it; neither exits the calling shell nor changes its options.
#
# Environment:
#   AGENTS_RUNNER_DOCKERD_LOG    where a dockerd started here logs
#                                (default /var/log/agents-runner-dockerd.log)
#   AGENTS_RUNNER_DOCKERD_WAIT   seconds to wait for `docker info` (default 60)

AGENTS_RUNNER_ROOT=${AGENTS_RUNNER_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

_ar_say() { printf '%s\n' "engine: $*" >&2; }

_ar_is_root() { [ "$(id -u)" = 0 ]; }

_ar_have_apt() { command -v apt-get >/dev/null 2>&1 && [ -r /etc/debian_version ]; }

# Install Debian packages when we can (root + apt); otherwise say exactly what to run.
_ar_apt_install() {
    local -a pkgs=("$@")
    if ! _ar_have_apt; then
        _ar_say "missing: ${pkgs[*]}; this is not a Debian/apt system, so install the" \
            "equivalent packages with your package manager and run again"
        return 1
    fi
    if ! _ar_is_root; then
        _ar_say "missing: ${pkgs[*]}; install them as root and run again:" \
            "sudo apt-get update && sudo apt-get install -y ${pkgs[*]}"
        return 1
    fi
    _ar_say "installing ${pkgs[*]} with apt-get (this can take a minute)"
    if [ -z "${_AR_APT_UPDATED:-}" ]; then
        if ! DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null; then
            _ar_say "apt-get update failed; check /etc/apt/sources.list* and the network"
            return 1
        fi
        _AR_APT_UPDATED=1
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; then
        _ar_say "apt-get install ${pkgs[*]} failed (run it by hand to see why)"
        return 1
    fi
}

_ar_docker_answers() { timeout 20 docker info >/dev/null 2>&1; }

ensure_docker_engine() {
    local -a missing=()
    # dockerd is only needed here when the engine is local (no DOCKER_HOST).
    if ! command -v docker >/dev/null 2>&1 \
        || { [ -z "${DOCKER_HOST:-}" ] && ! command -v dockerd >/dev/null 2>&1; }; then
        missing+=(docker.io)
    fi
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    if [ "${#missing[@]}" -gt 0 ]; then
        _ar_apt_install "${missing[@]}" || return 1
        hash -r
    fi

    _ar_docker_answers && return 0

    if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST}" != unix:///var/run/docker.sock ]; then
        _ar_say "DOCKER_HOST=${DOCKER_HOST} does not answer (docker info failed);" \
            "start that engine or unset DOCKER_HOST to use a local dockerd"
        return 1
    fi
    if ! _ar_is_root; then
        local why
        why=$(timeout 20 docker info 2>&1 >/dev/null | tail -n 1)
        _ar_say "the Docker engine does not answer (${why:-docker info failed}). Start it as" \
            "root (sudo dockerd &, or sudo service docker start) or, if it runs, give this" \
            "user access to /var/run/docker.sock (sudo usermod -aG docker $(id -un))"
        return 1
    fi

    local log=${AGENTS_RUNNER_DOCKERD_LOG:-/var/log/agents-runner-dockerd.log}
    local wait_s=${AGENTS_RUNNER_DOCKERD_WAIT:-60}
    local pidfile=/var/run/docker.pid pid="" started=""

    if pid=$(pgrep -x dockerd | head -n 1) && [ -n "$pid" ]; then
        _ar_say "dockerd (pid $pid) is running but not answering yet; waiting up to ${wait_s}s"
    else
        if [ -f "$pidfile" ]; then
            pid=$(tr -dc '0-9' <"$pidfile")
            if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null \
                || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
                _ar_say "removing stale $pidfile (pid ${pid:-none} is not a running dockerd)"
                rm -f "$pidfile"
            fi
        fi
        mkdir -p "$(dirname "$log")"
        _ar_say "starting dockerd in the background (log: $log)"
        # setsid: the daemon must outlive this shell and ignore the caller's Ctrl-C.
        setsid nohup dockerd >>"$log" 2>&1 </dev/null &
        pid=$!
        started=1
    fi

    local deadline=$((SECONDS + wait_s))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if _ar_docker_answers; then
            [ -n "$started" ] && _ar_say "dockerd is up (pid $pid)"
            return 0
        fi
        if [ -n "$started" ] && ! kill -0 "$pid" 2>/dev/null; then
            _ar_say "dockerd exited during start-up; last lines of $log:"
            tail -n 15 "$log" >&2
            return 1
        fi
        sleep 0.5
    done
    _ar_say "dockerd (pid $pid) did not answer \`docker info\` within ${wait_s}s; last lines of $log:"
    tail -n 15 "$log" >&2 2>/dev/null
    return 1
}

ensure_venv() {
    local root=${1:-$AGENTS_RUNNER_ROOT}
    local venv=$root/.venv
    local stamp=$venv/.agents-runner-installed

    if [ ! -x "$venv/bin/python" ]; then
        if ! command -v python3 >/dev/null 2>&1; then
            _ar_apt_install python3 python3-venv || return 1
            hash -r
        fi
        if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            _ar_say "python3 is $(python3 -V 2>&1); agents-runner needs Python 3.11 or newer"
            return 1
        fi
        if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
            _ar_apt_install python3-venv || return 1
        fi
        _ar_say "creating $venv"
        if ! python3 -m venv "$venv"; then
            rm -rf "$venv"
            _ar_say "python3 -m venv $venv failed"
            return 1
        fi
    fi

    local want have=""
    want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1) $("$venv/bin/python" -V 2>&1)"
    [ -f "$stamp" ] && have=$(cat "$stamp")
    [ "$want" = "$have" ] && return 0

    _ar_say "installing agents-runner and its test dependencies into $venv"
    rm -f "$stamp"
    if ! (cd "$root" && "$venv/bin/python" -m pip install -qq --disable-pip-version-check \
        -e '.[test]'); then
        _ar_say "pip install -e '.[test]' failed in $root (see the messages above)"
        return 1
    fi
    printf '%s\n' "$want" >"$stamp"
}
