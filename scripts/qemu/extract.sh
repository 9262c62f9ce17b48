#!/usr/bin/env bash
# Unpack data a guest printed with vp2p-emit:
#
#   scripts/qemu/extract.sh LOGFILE NAME OUTDIR
#
# Finds the LAST block "==VP2P-BEGIN NAME==" ... "==VP2P-END NAME==" in LOGFILE (a serial
# console log; CRs are ignored), base64-decodes it and untars the tar.gz into OUTDIR.
# Exit status: 0 ok, 1 no such block / truncated / corrupt (gzip CRC), 2 usage.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -eq 3 ] || usage_from_header
LOGFILE="$1" NAME="$2" OUTDIR="$3"
[ -r "$LOGFILE" ] || die "log file not readable: $LOGFILE"
case "$NAME" in *[!A-Za-z0-9._-]*|"") die "NAME must match [A-Za-z0-9._-]+: '$NAME'" ;; esac

B64="$(mktemp "${TMPDIR:-/tmp}/vp2p-extract.XXXXXX")"
trap 'rm -f "$B64"' EXIT
# state: 0 outside, 1 inside; the last complete block wins; an unterminated block is an error.
if ! tr -d '\r' <"$LOGFILE" | awk -v b="==VP2P-BEGIN $NAME==" -v e="==VP2P-END $NAME==" -v out="$B64" '
    $0 == b { on = 1; n = 0; delete buf; next }
    $0 == e && on { on = 0; done = 1; printf "" > out; for (i = 1; i <= n; i++) print buf[i] > out; close(out); next }
    on { if ($0 ~ /^[A-Za-z0-9+\/=]+$/) buf[++n] = $0; else bad++ }
    END { if (on) { print "unterminated block (guest stopped while printing?)" > "/dev/stderr"; exit 3 }
          if (!done) exit 4
          if (bad) print "warning: ignored " bad " non-base64 line(s) inside the block" > "/dev/stderr" }'; then
    die "no complete ==VP2P-BEGIN $NAME== ... ==VP2P-END $NAME== block in $LOGFILE"
fi
mkdir -p "$OUTDIR"
base64 -d "$B64" | tar -xzf - -C "$OUTDIR" || die "block $NAME in $LOGFILE is corrupt (base64/gzip/tar failed)"
log "extracted $NAME ($(wc -c <"$B64") base64 bytes) into $OUTDIR"
