# shellcheck shell=bash
# The suite's clock, sourced by scripts/test.sh and scripts/setup.sh: with
# VP2P_CLOCK naming a file, `clocked NAME CMD...` runs CMD and appends
# "NAME<TAB>seconds" to it; without, it only runs CMD.

now_ms() { date +%s%3N; }

# seconds_since START_MS -> "12.3"
seconds_since() {
    local ms=$(($(now_ms) - $1))
    printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

clocked() {
    local name=$1 start rc=0
    shift
    start=$(now_ms)
    "$@" || rc=$?
    [ -z "${VP2P_CLOCK:-}" ] || printf '%s\t%s\n' "$name" "$(seconds_since "$start")" >> "$VP2P_CLOCK"
    return $rc
}
