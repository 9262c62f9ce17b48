# The init of vp2p-vm's guest (scripts/qemu/mkinitramfs.sh --init): what the
# guest's driver would read of each GPU, p2p-guest's probe and each NVIDIA
# function's config space, between markers on the console.
class=""
for w in $(cat /proc/cmdline); do
    case "$w" in vp2p_gpu_class=?*) class="--gpu-class ${w#vp2p_gpu_class=}" ;; esac
done
# Kernel messages share the console: under TCG a late one (a clocksource
# warning, say) landed inside the probe's JSON. Only emergencies from here on.
echo 1 >/proc/sys/kernel/printk
echo "==VP2P-PROBE-BEGIN=="
# shellcheck disable=SC2086
p2p-guest probe --json --no-driver $class
echo "==VP2P-PROBE-END== rc $?"
for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x10de ] || continue
    echo "==VP2P-CONFIG $(basename "$d") $(od -An -tx1 -v -N 256 "$d/config" | tr -d '\n')"
done
