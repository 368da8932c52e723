#!/bin/sh
# Slurm Epilog, the pair of gpuwaste-prolog.sh (same variables): removes the job's id from the
# DCGM job-mapping file of each of its GPUs (the file goes when no job is left in it), and, if
# JOBSTATS_GPUSTAT_DIR is set, the Jobstats /run/gpustat files the prolog wrote for the job.
# The variables and the job's GPUs below are read alike by gpuwaste-prolog.sh: each script is
# installed alone (prolog.d/, epilog.d/), and tests/test_slurm_prolog.py runs both on each.
DCGM_DIR="${DCGM_HPC_JOB_MAPPING_DIR:-/var/lib/dcgm-exporter/job-mapping}"
GPUSTAT_DIR="${JOBSTATS_GPUSTAT_DIR:-}"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"

[ -n "$SLURM_JOB_ID" ] || exit 0
devices=$(printf '%s,%s,%s' "${SLURM_JOB_GPUS:-}" "${CUDA_VISIBLE_DEVICES:-}" \
    "${GPU_DEVICE_ORDINAL:-}" | tr ',' '\n' | sed '/^$/d' | sort -u)
[ -n "$devices" ] || exit 0

# drop a line from a file, replacing it whole; remove the file when nothing is left
drop_line() {
    file=$1 line=$2
    [ -f "$file" ] || return 0
    tmp="$file.tmp.$$"
    grep -vxF "$line" "$file" > "$tmp"
    if [ -s "$tmp" ]; then mv -f "$tmp" "$file"; else rm -f "$tmp" "$file"; fi
}

# remove a Jobstats file only if it still names this job (the next job may own it already)
drop_owned() {
    file=$1
    [ -f "$file" ] || return 0
    read -r owner _ < "$file" || owner=
    [ "$owner" = "$SLURM_JOB_ID" ] && rm -f "$file"
    return 0
}

for dev in $devices; do
    case $dev in
        *[!0-9]*) ;;
        *) drop_line "$DCGM_DIR/$dev" "$SLURM_JOB_ID" ;;
    esac
done

if [ -n "$GPUSTAT_DIR" ]; then
    for dev in $devices; do
        drop_owned "$GPUSTAT_DIR/$dev"
        case $dev in
            *[!0-9]*) ;;
            *) uuid=$("$NVIDIA_SMI" --query-gpu=uuid --format=noheader,csv -i "$dev" 2>/dev/null)
               [ -n "$uuid" ] && drop_owned "$GPUSTAT_DIR/$uuid" ;;
        esac
    done
fi
exit 0
