#!/usr/bin/env bash
# grpo-sweeps sacct shim (installed as /usr/local/bin/sacct by scripts/slurm_cluster.sh start,
# removed by stop).
#
# The local test cluster has no slurmdbd, so the real `sacct` only prints
# "Slurm accounting storage is disabled". submitit polls `sacct -o JobID,State,NodeList
# --parsable2 -j ID ...` to notice jobs that died without writing their result pickle
# (scancel, node failure, time limit, OOM); without an answer it waits for ever.
# This shim answers that query from slurmctld's memory (squeue -t all), which keeps
# finished jobs for MinJobAge seconds. Anything else goes to the real sacct.
set -uo pipefail
REAL=/usr/bin/sacct

# Accounting configured? Then the real thing.
if [[ "$(scontrol show config 2>/dev/null | awk -F= '/^AccountingStorageType/ {gsub(/ /, "", $2); print $2}')" != "accounting_storage/none" ]]; then
    exec "$REAL" "$@"
fi

fields="JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
parsable=0
noheader=0
jobs=()
while (($#)); do
    case "$1" in
        -o | --format) fields="$2"; shift 2 ;;
        --format=*) fields="${1#*=}"; shift ;;
        -j | --jobs) IFS=',' read -r -a more <<<"$2"; jobs+=("${more[@]}"); shift 2 ;;
        --jobs=*) IFS=',' read -r -a more <<<"${1#*=}"; jobs+=("${more[@]}"); shift ;;
        -P | --parsable2) parsable=1; shift ;;
        -p | --parsable) parsable=1; shift ;;
        -n | --noheader) noheader=1; shift ;;
        -X | --allocations | -a | --allusers | -D | --duplicates | -L | --allclusters) shift ;;
        *) exec "$REAL" "$@" ;;  # unsupported option: let the real sacct answer
    esac
done
((parsable)) || exec "$REAL" "$@"

# sacct field -> squeue format code
IFS=',' read -r -a names <<<"$fields"
fmt=""
for n in "${names[@]}"; do
    case "${n,,}" in
        jobid | jobidraw) c="%i" ;;
        state) c="%T" ;;
        nodelist) c="%N" ;;
        jobname) c="%j" ;;
        partition) c="%P" ;;
        account) c="%a" ;;
        alloccpus | ncpus) c="%C" ;;
        elapsed) c="%M" ;;
        start) c="%S" ;;
        end) c="%e" ;;
        submit) c="%V" ;;
        timelimit) c="%l" ;;
        reason) c="%r" ;;
        *) c="" ;;
    esac
    fmt+="${fmt:+|}$c"
done
((noheader)) || (IFS='|'; echo "${names[*]}")
for j in "${jobs[@]}"; do
    # one call per id: squeue fails as a whole when one id is unknown/purged
    squeue -h -t all -j "$j" -o "$fmt" 2>/dev/null
done
exit 0
