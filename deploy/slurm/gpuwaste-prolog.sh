#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/gpuwaste-prolog.sh, or a file in a
# Prolog=/etc/slurm/prolog.d/* directory): names the job on its GPUs' telemetry.
#
# - DCGM exporter: one file per GPU in $DCGM_HPC_JOB_MAPPING_DIR, named by the GPU's number,
#   holding the ids of the jobs on it, one per line (the format dcgm-exporter reads with
#   --hpc-job-mapping-dir / DCGM_HPC_JOB_MAPPING_DIR: internal/pkg/transformation/hpc.go). It
#   adds them to every series of that GPU as the `hpc_job` label.
# - Princeton Jobstats (only if JOBSTATS_GPUSTAT_DIR is set, e.g. /run/gpustat): one file per
#   GPU number (and per GPU UUID when nvidia-smi is there, per MIG UUID for a MIG device)
#   holding "JOBID UID", as Jobstats' own slurm/prolog.d/gpustats_helper.sh writes it.
#
# The GPU numbers are Slurm's (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES / GPU_DEVICE_ORDINAL
# as Slurm sets them for the prolog): gres.conf's order, which is the NVML index dcgm-exporter
# uses only where gres.conf lists the GPUs in NVML's order (AutoDetect=nvml does). POSIX sh;
# never fails the job (exit 0): a missing label costs a tie, a failed prolog drains the node.
# The variables and the job's GPUs below are read alike by gpuwaste-epilog.sh: each script is
# installed alone (prolog.d/, epilog.d/), and tests/test_slurm_prolog.py runs both on each.
DCGM_DIR="${DCGM_HPC_JOB_MAPPING_DIR:-/var/lib/dcgm-exporter/job-mapping}"
GPUSTAT_DIR="${JOBSTATS_GPUSTAT_DIR:-}"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"

[ -n "$SLURM_JOB_ID" ] || exit 0
devices=$(printf '%s,%s,%s' "${SLURM_JOB_GPUS:-}" "${CUDA_VISIBLE_DEVICES:-}" \
    "${GPU_DEVICE_ORDINAL:-}" | tr ',' '\n' | sed '/^$/d' | sort -u)
[ -n "$devices" ] || exit 0

# add a line to a file, once, replacing the file whole (the exporter never reads half of it)
add_line() {
    file=$1 line=$2
    if [ -f "$file" ] && grep -qxF "$line" "$file"; then return 0; fi
    tmp="$file.tmp.$$"
    { [ -f "$file" ] && cat "$file"; printf '%s\n' "$line"; } > "$tmp" && mv -f "$tmp" "$file"
}

mkdir -p "$DCGM_DIR" 2>/dev/null && chmod 755 "$DCGM_DIR" 2>/dev/null
for dev in $devices; do
    case $dev in
        *[!0-9]*) ;;  # a MIG UUID: dcgm-exporter's files name whole GPUs by number only
        *) add_line "$DCGM_DIR/$dev" "$SLURM_JOB_ID" ;;
    esac
done

if [ -n "$GPUSTAT_DIR" ]; then
    mkdir -p "$GPUSTAT_DIR" 2>/dev/null && chmod 755 "$GPUSTAT_DIR" 2>/dev/null
    for dev in $devices; do
        printf '%s %s\n' "$SLURM_JOB_ID" "${SLURM_JOB_UID:-}" > "$GPUSTAT_DIR/$dev"
        case $dev in
            *[!0-9]*) ;;
            *) uuid=$("$NVIDIA_SMI" --query-gpu=uuid --format=noheader,csv -i "$dev" 2>/dev/null)
               [ -n "$uuid" ] && printf '%s %s\n' "$SLURM_JOB_ID" "${SLURM_JOB_UID:-}" \
                   > "$GPUSTAT_DIR/$uuid" ;;
        esac
    done
fi
exit 0
