#!/usr/bin/env bash
# User-space instructions per request of each bench server, side by side, under callgrind.
#
#   bash bench/scripts/instructions.sh [requests]            (default 1000)
#   bash bench/scripts/instructions.sh --redis [requests]    Redis's instructions instead
#   bash bench/scripts/instructions.sh -c 64 [requests]      over 64 connections (ab -k)
#   ROWS='deny list' bash bench/scripts/instructions.sh      only the rows whose label has
#                                                            that text, with (a), (f) and (h)
#
# Throughput on a shared VM moves by tens of percent from one measurement to the next;
# instruction counts do not (within 1 % between repeats), so this is how two builds of the
# request path are compared (BENCHMARKS.md, "Where the time goes"). Each server runs alone under
# `valgrind --tool=callgrind`; after a warm-up of 200 requests the counters are zeroed, then
# `requests` sequential requests are sent over one keep-alive connection (curl, with the
# `X-Forwarded-For` wrk sends) and the
# counters dumped. Kernel work (sockets, the answer's size) is not counted.
#
# With `--redis` the servers run as usual and `redis-server` runs under callgrind instead
# (one for all servers, `hz 1` so its timers hardly count): what Redis does per HTTP request
# (reading the command, the script or commands, the reply), each request's commands read
# on their own, as at one connection.
#
# Needs valgrind, curl, redis-server and a release build of bench_server
# (`cargo build --release -p ratelimit-bench`). Starts its own redis-server on a free
# loopback port and stops everything it started.
set -euo pipefail

profile=server
if [ "${1:-}" = --redis ]; then
    profile=redis
    shift
fi
# Connections at once: 1 sends the requests one after another over one connection (curl);
# more sends them with ab's keep-alive connections, where concurrent checks share calls.
connections=1
if [ "${1:-}" = -c ]; then
    connections=${2:?instructions.sh: -c needs a number of connections}
    shift 2
fi
requests=${1:-1000}
root=$(cd "$(dirname "$0")/../.." && pwd)
server=${BENCH_SERVER:-$root/target/release/bench_server}
tools="valgrind callgrind_control curl redis-server"
[ "$connections" -gt 1 ] && tools="$tools ab"
for tool in $tools; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: \`$tool\` is missing (apt-get install -y valgrind curl redis-server apache2-utils)" >&2; exit 1; }
done
[ -x "$server" ] || { echo "instructions.sh: no $server; run \`cargo build --release -p ratelimit-bench\`" >&2; exit 1; }

work=$(mktemp -d)
# A loopback port nothing listens on.
free_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
}
pid=
redis_pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
    if [ -n "$redis_pid" ]; then
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
# Redis's own log says when it listens: a port some other process took after free_port
# makes this one exit instead, and the script tries another port.
redis_ready() { grep -qi 'ready to accept connections' "$work/redis.log" 2>/dev/null; }
for try in 1 2 3 4 5; do
    redis_port=$(free_port)
    rm -f "$work/redis.log"
    if [ "$profile" = redis ]; then
        valgrind --tool=callgrind --callgrind-out-file="$work/redis.out.%p" \
            redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --hz 1 \
            >"$work/redis.log" 2>&1 &
    else
        redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
            >"$work/redis.log" 2>&1 &
    fi
    redis_pid=$!
    for _ in $(seq 120); do
        redis_ready || ! kill -0 "$redis_pid" 2>/dev/null && break
        sleep 0.5
    done
    redis_ready && break
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=
    [ "$try" = 5 ] && { echo "instructions.sh: redis-server did not start; its log:" >&2; cat "$work/redis.log" >&2; exit 1; }
done

# Sends `count` GETs of `url` over one connection, from the HTTP benchmark's one client: an
# `X-Forwarded-For` the servers read as the client (one trusted proxy), as wrk sends it.
send() {
    local url=$1 count=$2 args=()
    if [ "$connections" -gt 1 ]; then
        ab -q -k -n "$count" -c "$connections" -H 'X-Forwarded-For: 198.18.255.1' "$url" >"$work/ab.log" 2>&1 \
            || { echo "instructions.sh: ab failed:" >&2; cat "$work/ab.log" >&2; exit 1; }
        return
    fi
    for _ in $(seq "$count"); do args+=("$url" -o /dev/null); done
    curl -s -H 'X-Forwarded-For: 198.18.255.1' "${args[@]}"
}

# label | server arguments | path
targets=(
    "(a) no limiter|--variant none|/allow"
    "(f) floor per worker|--variant floor-per-worker|/allow"
    "(h) floor (f) with the five headers|--variant floor-headers|/allow"
    "(e) fixed_window, allowed|--variant project --route fixed_window|/allow/fixed_window"
    "(e) fixed_window, allowed, no rate-limit headers|--variant project --route fixed_window --no-headers|/allow/fixed_window"
    "(e) fixed_window, allowed, a 1-entry deny list|--variant project --route fixed_window --deny-list 1|/allow/fixed_window"
    "(e) fixed_window, allowed, a 100,000-entry deny list|--variant project --route fixed_window --deny-list 100000|/allow/fixed_window"
    "(e) sliding_window, allowed|--variant project --route sliding_window|/allow/sliding_window"
    "(e) sliding_log, allowed|--variant project --route sliding_log|/allow/sliding_log"
    "(e) gcra, allowed|--variant project --route gcra|/allow/gcra"
    "(e) stacked, allowed|--variant project --route stacked|/allow/stacked"
    "(e) gcra, shielded 429|--variant project --route gcra|/flood/gcra"
    "(c) actix-governor, allowed|--variant governor|/allow"
    "(e) sync, allowed from a share|--variant project --sync|/allow/sync"
    "(e) sync, allowed from a share, no rate-limit headers|--variant project --sync --no-headers|/allow/sync"
    "(g) answer only: the same 429, nothing decided|--variant answer-only|/flood"
)

if [ "$profile" = redis ]; then
    printf '| server | requests | Redis instructions per request | × (f) |\n|---|---:|---:|---:|\n'
else
    printf '| server | requests | instructions per request | × (a) | × (f) |\n|---|---:|---:|---:|---:|\n'
fi
none=
floor=
# ×a/b, or a dash before b is measured.
ratio() { if [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "×%.2f", a / b }'; else printf '—'; fi; }
for target in "${targets[@]}"; do
    IFS='|' read -r label arguments path <<<"$target"
    case $label in
        "(a)"* | "(f)"* | "(h)"* | "(e) fixed_window, allowed") ;;
        *) [ -n "${ROWS:-}" ] && [[ $label != *"$ROWS"* ]] && continue ;;
    esac
    out="$work/callgrind.out"
    rm -f "$work/server.log"
    # The process whose instructions are counted, and the file callgrind writes for it.
    # The server picks its own port and names it (`bench_server listening on <address>`).
    if [ "$profile" = redis ]; then
        # shellcheck disable=SC2086 # the arguments are words on purpose
        "$server" $arguments --port 0 --redis "redis://127.0.0.1:$redis_port" \
            >"$work/server.log" 2>&1 &
        pid=$!
        counted=$redis_pid
        dumps="$work/redis.out.$redis_pid"
    else
        # shellcheck disable=SC2086 # the arguments are words on purpose
        valgrind --tool=callgrind --callgrind-out-file="$out.%p" \
            "$server" $arguments --port 0 --redis "redis://127.0.0.1:$redis_port" \
            >"$work/server.log" 2>&1 &
        pid=$!
        counted=$pid
        dumps="$out.$pid"
    fi
    address=
    for attempt in $(seq 120); do
        address=$(sed -n 's/^bench_server listening on //p' "$work/server.log" 2>/dev/null | head -n 1)
        [ -n "$address" ] && break
        if [ "$attempt" = 120 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "instructions.sh: \`bench_server $arguments\` did not start; its output:" >&2
            cat "$work/server.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    url="http://$address$path"
    send "$url" 200
    callgrind_control -z "$counted" >/dev/null 2>&1
    send "$url" "$requests"
    callgrind_control -d "$counted" >/dev/null 2>&1
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    total=$(grep -h '^summary:' "$dumps".[0-9]* | awk '{ s += $2 } END { print s }')
    pid=
    rm -f "$dumps".[0-9]*
    per=$((total / requests))
    case $label in
        "(a)"*) none=$per ;;
        "(f)"*) floor=$per ;;
    esac
    if [ "$profile" = redis ]; then
        printf '| %s | %d | %d | %s |\n' "$label" "$requests" "$per" "$(ratio "$per" "$floor")"
    else
        printf '| %s | %d | %d | %s | %s |\n' "$label" "$requests" "$per" \
            "$(ratio "$per" "$none")" "$(ratio "$per" "$floor")"
    fi
done
