# shellcheck shell=bash
# Shared setup for scripts/test, scripts/demo and scripts/build-images. Source it, then call:
#
#   ensure_docker_engine   the docker CLI, dockerd and debootstrap are installed (Debian's
#                          docker.io and debootstrap packages, installed with apt-get when
#                          missing and running as root) and `docker info` answers (dockerd
#                          is started in the background when it does not).
#   ensure_runsc_runtime   gVisor's `runsc` (Debian's runsc package, installed when missing)
#                          is registered with the engine as the runtime `runsc`: merged
#                          into /etc/docker/daemon.json (other settings kept) with the
#                          runtime argument --network=none, then dockerd reloaded
#                          (SIGHUP) until `docker info` lists it so. Nothing is done when
#                          the engine already does. Call it after ensure_docker_engine.
#   ensure_venv [ROOT] [EXTRAS]
#                          ROOT/.venv exists and has `pip install -e '.[EXTRAS]'` of ROOT's
#                          pyproject.toml (EXTRAS default `test`; an empty EXTRAS installs
#                          the project alone, as scripts/demo does; skipped while
#                          pyproject.toml is unchanged and EXTRAS were installed).
#
# Each returns non-zero with a message on stderr that says what is missing and how to get
# it; none exits the calling shell nor changes its options.
#
# Environment:
#   AGENTS_RUNNER_DOCKERD_LOG    where a dockerd started here logs
#                                (default /var/log/agents-runner-dockerd.log)
#   AGENTS_RUNNER_DOCKERD_WAIT   seconds to wait for `docker info` (default 60)
#   AGENTS_RUNNER_DOCKER_CONFIG  the daemon.json ensure_runsc_runtime merges into
#                                (default /etc/docker/daemon.json)

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

_ar_engine_runtimes() { timeout 20 docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}' 2>/dev/null; }

_ar_engine_has_runtime() { case " $(_ar_engine_runtimes) " in *" $1 "*) return 0 ;; esac; return 1; }

# runsc's arguments as we register them: without --network=none it cannot start containers
# here ("cannot run with network enabled in root network namespace"), and our containers
# have no network anyway. Not --oci-seccomp: this runsc then answers every refused syscall
# with EPERM (it ignores the profile's ENOSYS), which breaks glibc's clone3 fallback, so
# no worker could start a child (docs/threat-model.md, the gVisor rows).
_AR_RUNSC_ARGS='["--network=none"]'

# Whether the engine lists runsc with (at least) those arguments.
_ar_runsc_registered() {
    local args
    args=$(timeout 20 docker info --format '{{json .Runtimes.runsc}}' 2>/dev/null) || return 1
    printf '%s' "$args" | jq -e --argjson want "$_AR_RUNSC_ARGS" \
        '(.runtimeArgs // []) as $have | all($want[]; . as $a | $have | index($a))' \
        >/dev/null 2>&1
}

# The pid of the local dockerd, if one runs (the pid file first: it names the daemon that
# owns /var/run/docker.sock when several run).
_ar_dockerd_pid() {
    local pid=""
    [ -f /var/run/docker.pid ] && pid=$(tr -dc '0-9' </var/run/docker.pid)
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
        printf '%s\n' "$pid"
        return 0
    fi
    pgrep -x dockerd | head -n 1
}

ensure_runsc_runtime() {
    command -v jq >/dev/null 2>&1 && _ar_runsc_registered && return 0
    local config=${AGENTS_RUNNER_DOCKER_CONFIG:-/etc/docker/daemon.json}
    local wait_s=${AGENTS_RUNNER_DOCKERD_WAIT:-60}
    if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST}" != unix:///var/run/docker.sock ]; then
        _ar_say "the engine at DOCKER_HOST=${DOCKER_HOST} has no runtime 'runsc' registered" \
            "with --network=none (it has: $(_ar_engine_runtimes)); on that" \
            "machine install gVisor (Debian: apt-get install runsc), add to its daemon.json" \
            '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": '"$_AR_RUNSC_ARGS"'}}}' \
            "then reload dockerd (kill -HUP)"
        return 1
    fi
    local -a missing=()
    command -v runsc >/dev/null 2>&1 || missing+=(runsc)
    command -v jq >/dev/null 2>&1 || missing+=(jq)
    if [ "${#missing[@]}" -gt 0 ]; then
        _ar_apt_install "${missing[@]}" || return 1
        hash -r
    fi
    if ! _ar_is_root; then
        _ar_say "the engine has no runtime 'runsc' registered as agents-runner needs; as root, merge" \
            '{"runtimes": {"runsc": {"path": "'"$(command -v runsc)"'", "runtimeArgs": '"$_AR_RUNSC_ARGS"'}}}' \
            "into $config and reload dockerd (sudo kill -HUP \$(pidof dockerd)), or run" \
            "scripts/test as root"
        return 1
    fi

    # Merge, never overwrite: every other setting (and runtime) of the file is kept.
    _ar_engine_has_runtime runsc \
        && _ar_say "the engine's runsc lacks the arguments $_AR_RUNSC_ARGS; registering it again"
    local runsc_path current="{}" merged
    runsc_path=$(command -v runsc)
    if [ -s "$config" ]; then
        if ! current=$(jq -e 'if type == "object" then . else error("not a JSON object") end' \
            "$config" 2>&1); then
            _ar_say "$config is not a JSON object ($current); fix it, then run again"
            return 1
        fi
    fi
    merged=$(printf '%s' "$current" | jq --arg path "$runsc_path" --argjson args "$_AR_RUNSC_ARGS" \
        '.runtimes = ((.runtimes // {}) + {"runsc": {"path": $path, "runtimeArgs": $args}})') \
        || { _ar_say "could not merge the runsc runtime into $config"; return 1; }
    if [ "$merged" != "$current" ]; then
        mkdir -p "$(dirname "$config")"
        # Written beside it and renamed: a reload never reads a half-written file.
        if ! printf '%s\n' "$merged" >"$config.agents-runner.tmp" \
            || ! mv -f "$config.agents-runner.tmp" "$config"; then
            rm -f "$config.agents-runner.tmp"
            _ar_say "could not write $config"
            return 1
        fi
        _ar_say "registered runsc ($runsc_path) in $config"
    fi

    local pid
    pid=$(_ar_dockerd_pid)
    if [ -z "$pid" ]; then
        _ar_say "no local dockerd runs to reload; $config takes effect at its next start"
        return 1
    fi
    # SIGHUP reloads the configuration (runtimes included) without stopping containers.
    _ar_say "reloading dockerd (pid $pid) so that it picks up the runtime"
    kill -HUP "$pid" || { _ar_say "could not signal dockerd (pid $pid)"; return 1; }
    local deadline=$((SECONDS + wait_s))
    while [ "$SECONDS" -lt "$deadline" ]; do
        _ar_runsc_registered && { _ar_say "the engine lists runtime runsc"; return 0; }
        sleep 0.5
    done
    _ar_say "dockerd (pid $pid) does not list runsc ${wait_s}s after the reload (it has:" \
        "$(_ar_engine_runtimes)); its log (${AGENTS_RUNNER_DOCKERD_LOG:-/var/log/agents-runner-dockerd.log}," \
        "or journalctl -u docker) says why"
    return 1
}

ensure_venv() {
    local root=${1:-$AGENTS_RUNNER_ROOT}
    local extras=${2-test}
    local venv=$root/.venv
    local stamp=$venv/.agents-runner-installed
    local spec=. what="agents-runner"
    if [ -n "$extras" ]; then
        spec=".[$extras]" what="agents-runner and its $extras dependencies"
    fi

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

    # The stamp: the pyproject's hash, the interpreter, then the extras installed with them.
    local want have=""
    want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1) $("$venv/bin/python" -V 2>&1)"
    [ -f "$stamp" ] && have=$(cat "$stamp")
    [ "$have" = "$want [$extras]" ] && return 0
    if [ -z "$extras" ]; then  # the project alone: any extras installed with it will do
        case "$have" in "$want ["*"]") return 0 ;; esac
    fi

    _ar_say "installing $what into $venv"
    rm -f "$stamp"
    if ! (cd "$root" && "$venv/bin/python" -m pip install -qq --disable-pip-version-check \
        -e "$spec"); then
        _ar_say "pip install -e '$spec' failed in $root (see the messages above)"
        return 1
    fi
    printf '%s\n' "$want [$extras]" >"$stamp"
}
