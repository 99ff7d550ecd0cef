#!/usr/bin/env bash
# Fake Cray /sys/cray/pm_counters for two nodes: every second energy += power (J), written
# atomically (temp file + rename) so that a reader never sees a half-written file.
# Usage: pm_counter_loop.sh PMDIR   (PMDIR/n1, PMDIR/n2)
PM=$1
declare -A E=([n1]=100000 [n2]=200000) P=([n1]=150 [n2]=230)
start=$(date +%s)
for n in n1 n2; do
    d=$PM/$n
    echo "$start" >"$d/startup"; echo 1 >"$d/generation"; echo 2 >"$d/version"
    echo "0 W" >"$d/power_cap"; echo "${P[$n]} W" >"$d/power"
    echo "${E[$n]} J" >"$d/energy"; echo "$start" >"$d/freshness"
done
while :; do
    sleep 1
    for n in n1 n2; do
        d=$PM/$n
        E[$n]=$(( ${E[$n]} + ${P[$n]} ))
        printf '%s J\n' "${E[$n]}" >"$d/.energy.tmp" && mv -f "$d/.energy.tmp" "$d/energy"
        printf '%s W\n' "${P[$n]}" >"$d/.power.tmp" && mv -f "$d/.power.tmp" "$d/power"
        date +%s >"$d/.fresh.tmp" && mv -f "$d/.fresh.tmp" "$d/freshness"
    done
done
