#!/bin/sh
# Guest init script: print what NOTES.md records about IOMMU groups, ACS, NUMA and sysfs
# paths, then emit a sysfs snapshot (vp2p-emit NAME "sysfs").
# Used by scripts/qemu/selftest.sh; also handy by hand:
#   scripts/qemu/mkinitramfs.sh /tmp/p.cpio.gz --init scripts/qemu/guest/probe.sh
#   scripts/qemu/boot.sh --qemu 10 --topology two-socket --iommu on --initrd /tmp/p.cpio.gz --log /tmp/p.log
#   scripts/qemu/extract.sh /tmp/p.log sysfs /tmp/p-sysfs
echo "== cmdline: $(cat /proc/cmdline)"
echo "== dmesg (iommu/dmar/acs/numa)"
dmesg | grep -i -E 'dmar|iommu|acs|numa|srat|pxm|node [0-9]' | head -n 60
echo "== iommu_groups: $(ls /sys/kernel/iommu_groups 2>/dev/null | wc -l) groups"
for g in /sys/kernel/iommu_groups/*; do
    [ -d "$g/devices" ] || continue
    echo "group ${g##*/}: $(ls "$g/devices" | tr '\n' ' ')"
done
echo "== devices: BDF class numa_node iommu_group driver realpath"
for dev in /sys/bus/pci/devices/*; do
    bdf=${dev##*/}
    grp=-; [ -e "$dev/iommu_group" ] && grp=$(basename "$(readlink "$dev/iommu_group")")
    drv=-; [ -e "$dev/driver" ] && drv=$(basename "$(readlink "$dev/driver")")
    echo "$bdf $(cat "$dev/class") node=$(cat "$dev/numa_node") group=$grp driver=$drv $(realpath "$dev")"
done
echo "== GPUs (nvme serial, realpath, numa_node, iommu_group)"
for n in /sys/class/nvme/nvme*; do
    [ -e "$n" ] || continue
    d="$(realpath "$n/device")"
    grp=-; [ -e "$d/iommu_group" ] && grp=$(basename "$(readlink "$d/iommu_group")")
    echo "GPU $(tr -d " " <"$n/serial") $d node=$(cat "$d/numa_node") group=$grp"
done
echo "== ACS per bridge (lspci -vvv)"
for dev in /sys/bus/pci/devices/*; do
    bdf=${dev##*/}
    out=$(lspci -vvv -s "$bdf")
    case "$(cat "$dev/class")" in 0x0604*) ;; *) continue ;; esac
    type=$(echo "$out" | grep -o 'Express (v[0-9]) [A-Za-z ]*Port[^,]*' | head -n1)
    acs=$(echo "$out" | grep -A3 'Access Control Services' | grep -E 'ACSCap|ACSCtl' | sed 's/^[[:space:]]*//' | tr '\n' ' ')
    echo "$bdf [$type] ${acs:-NO ACS capability}"
    setpci -s "$bdf" ECAP_ACS+6.w >/dev/null 2>&1 && echo "   setpci ACS ctrl word: $(setpci -s "$bdf" ECAP_ACS+6.w)"
done
echo "== endpoint ext caps"
for dev in /sys/bus/pci/devices/*; do
    case "$(cat "$dev/class")" in 0x0604*|0x0600*) continue ;; esac
    echo "${dev##*/}: $(lspci -vvv -s "${dev##*/}" | grep -E '^\s+Capabilities: \[[0-9a-f]+( v[0-9])?\]' | sed 's/^[[:space:]]*Capabilities: //' | tr '\n' ';')"
done
echo "== config space size (bytes readable): $(for d in /sys/bus/pci/devices/*; do wc -c <"$d/config"; done | sort -u | tr '\n' ' ')"
echo "== find /sys/bus/pci /sys/devices/pci* | head -n 25"
find /sys/bus/pci /sys/devices/pci* | head -n 25
echo "== find /sys/devices/pci0000:20 -maxdepth 5 | grep -v -E '/(power|msi_irqs|link|nvme|net)/' | head -n 60"
find /sys/devices/pci0000:20 -maxdepth 5 | grep -v -E '/(power|msi_irqs|link|nvme|net)/' | head -n 60
echo "== sysfs snapshot"
t0=$(cut -d' ' -f1 /proc/uptime)
vp2p-sysfs-snapshot /tmp/snap
echo "snapshot took $t0 -> $(cut -d' ' -f1 /proc/uptime) s, $(find /tmp/snap | wc -l) entries, $(du -sk /tmp/snap | cut -f1) KiB, $(find /tmp/snap -type f -size 0 | wc -l) empty files"
find /tmp/snap -type f -size 0 | sed 's|.*/||' | sort | uniq -c | sort -rn | head -n 20
cd /tmp/snap && vp2p-emit sysfs sys
echo "emit done at $(cut -d' ' -f1 /proc/uptime) s"
