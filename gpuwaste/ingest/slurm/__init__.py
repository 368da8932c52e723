"""The Slurm source: sacct records and scontrol GPU indices -> jobs, job_gpus."""
