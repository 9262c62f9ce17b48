#!/bin/sh
# Guest init script for selftest.sh: emit ~1 MiB of random data and print its sha256.
mkdir -p /tmp/blob && cd /tmp/blob || exit 1
head -c 1048576 /dev/urandom > random.bin
echo "hello from the guest" > hello.txt
echo "==VP2P-SHA256 $(sha256sum random.bin | cut -d' ' -f1)=="
t0=$(cut -d' ' -f1 /proc/uptime)
vp2p-emit blob random.bin hello.txt
echo "emit of 1 MiB took $t0 -> $(cut -d' ' -f1 /proc/uptime) s"
